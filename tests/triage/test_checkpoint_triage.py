"""Triage of real-format checkpoints: a dense (bf16) one is refused unless a named recipe quantizes it
first, DeepSeek-V3.2's indexer is a caveat of the result, and the tokens can sit at any position."""

from __future__ import annotations

import inspect
import json
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import mla_debug as md
import mla_debug.triage as A
from mla_debug.model.indexer import SparseAttentionWarning
from mla_debug.model.weight_recipe import DenseWeightsError, WeightRecipe
from mla_debug.triage.caveats import Caveat, CaveatKind
from mla_debug.triage.positions import TokenPositions

sys.path.insert(0, str(Path(__file__).parents[1] / "model"))  # the checkpoint tests' shared builders
from ckpt_helpers import fp8_cast_bf16  # noqa: E402

SAMPLE = md.scenarios.data_folder() / "checkpoints" / "tiny-v3.2-fp8"
INDEXER_TENSORS = 7  # wq_b and wk with their scales, k_norm's weight and bias, weights_proj


@pytest.fixture(scope="module")
def bf16_sample(tmp_path_factory):
    return fp8_cast_bf16(SAMPLE, tmp_path_factory.mktemp("cast") / "tiny-v3.2-bf16")


# -- dense weights ---------------------------------------------------------------------------------------


def test_a_dense_checkpoint_is_refused_with_the_reason(bf16_sample):
    with pytest.raises(DenseWeightsError) as err:
        A.TriageSession(checkpoint=bf16_sample, layer=1, tokens=8)
    message = str(err.value)
    assert "holds dense (unquantized) linear weights" in message and "could not show the bugs" in message
    assert "quantize='deepseek'" in message and "--quantize deepseek" in message
    dense = md.Checkpoint.synthetic("tiny", quantize=False)
    with pytest.raises(DenseWeightsError):
        A.TriageSession(checkpoint=dense, tokens=8)
    with pytest.raises(DenseWeightsError):  # before any weight is read: the headers say the dtypes
        A.triage(checkpoint=bf16_sample, tp_sizes=(1,), tokens=8, progress=False)


def test_quantize_applies_to_a_dense_checkpoint_only_and_names_a_known_recipe(bf16_sample):
    with pytest.raises(ValueError, match=r"holds FP8 weights with their own block scales; quantize='deepseek'"):
        A.TriageSession(checkpoint=SAMPLE, layer=1, tokens=8, quantize="deepseek")
    with pytest.raises(ValueError, match=r"synthetic weights are block-quantized already"):
        A.TriageSession("tiny", tokens=8, quantize="deepseek")
    with pytest.raises(ValueError, match=r"quantize='aiter-hip' is not a recipe that quantizes 128x128 weight blocks"):
        A.TriageSession(checkpoint=bf16_sample, layer=1, tokens=8, quantize="aiter-hip")
    session = A.TriageSession("tiny", tokens=8)
    with pytest.raises(ValueError, match=r"quantize: options of the TriageSession"):
        A.triage(session=session, quantize="deepseek", progress=False)


def test_triage_takes_the_sessions_keyword_options_and_nothing_else():
    from mla_debug.triage.session import TriageSession, triage

    keyword_only = [p for p in inspect.signature(TriageSession).parameters.values() if p.kind is p.KEYWORD_ONLY]
    shown = inspect.signature(triage).parameters
    assert [p.name for p in keyword_only] == ["start_position", "positions", "quantize", "ignore_extra"]
    assert all(shown[p.name] == p for p in keyword_only) and list(shown)[-len(keyword_only) :] == [
        p.name for p in keyword_only
    ]
    session = A.TriageSession("tiny", tokens=8)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'quantise'; the options that build the session"):
        A.triage(session=session, quantise="deepseek", progress=False)
    # left at their defaults (a tensor of positions is compared by identity), they do not clash with session=
    with pytest.raises(ValueError, match=r"^positions: options of the TriageSession"):
        A.triage(session=session, positions=torch.arange(8), start_position=0, ignore_extra=False, progress=False)


@pytest.fixture(scope="module")
def quantized_here(bf16_sample):
    session = A.TriageSession(checkpoint=bf16_sample, layer=1, tokens=8, quantize="deepseek")
    return session, A.triage(scenario="vllm-pr51692", tp_sizes=(1, 4), modes=("decode",), session=session, progress=False)


def test_a_bf16_cast_quantized_here_diverges_where_its_fp8_original_does(quantized_here):
    """The false all-clear of the issue: the bf16 cast of an FP8 checkpoint would run dense and pass. Block-
    quantized by DeepSeek's recipe it shows what the FP8 original shows under the same scenario."""
    session, result = quantized_here
    assert session.ckpt.quantized and session.recipe == WeightRecipe("deepseek", (128, 128), "e4m3fn", False)
    original = A.triage(
        scenario="vllm-pr51692", tp_sizes=(1, 4), modes=("decode",), checkpoint=SAMPLE, tokens=8, progress=False
    )
    verdicts = {(c.tp, c.mode): (c.verdict, c.diff.first_divergent_step) for c in result.configs}
    assert verdicts == {(c.tp, c.mode): (c.verdict, c.diff.first_divergent_step) for c in original.configs}
    assert verdicts[(4, "decode")] == ("diverged", "absorb_uk") and verdicts[(1, "decode")][0] == "ok"


def test_the_recipe_is_stated_in_the_caveats_the_provenance_and_the_report(quantized_here, tmp_path):
    _, result = quantized_here
    recipe = WeightRecipe("deepseek", (128, 128), "e4m3fn", ue8m0=False)
    assert result.caveats[0] == Caveat(CaveatKind.WEIGHTS_QUANTIZED_HERE, recipe=recipe)
    assert result.provenance.weights.recipe == recipe.to_dict()
    assert "dense weights block-quantized here (deepseek recipe, e4m3fn, 128x128 blocks)" in result.provenance.line()
    back = md.load_triage(result.to_json(tmp_path / "t.json"))
    assert back.caveats == result.caveats and back.provenance == result.provenance
    html = md.viz.render_html(back)
    assert "weights quantized here" in html and "deepseek recipe" in html


# -- DeepSeek-V3.2: the indexer ----------------------------------------------------------------------------


def test_a_v32_checkpoint_says_its_indexer_is_not_modelled(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparseAttentionWarning)  # 16 tokens <= index_topk 32: no warning
        session = A.TriageSession(checkpoint=SAMPLE, layer=1, tokens=16)
    (caveat,) = session.caveats
    assert caveat.kind is CaveatKind.INDEXER_NOT_MODELLED and caveat.index_topk == 32
    assert len(caveat.tensors) == INDEXER_TENSORS and caveat.tensors == session.ckpt.unmodelled
    result = A.triage(scenario="vllm-pr56433", tp_sizes=(2,), session=session, progress=False)
    assert result.caveats == [caveat] and not result.report().diverged_runs
    back = md.load_triage(result.to_json(tmp_path / "v32.json"))
    assert back.caveats == [caveat]
    html = md.viz.render_html(back)
    assert "indexer present, not modelled" in html and "within the caveats below" in html


def test_more_tokens_than_index_topk_warn_and_are_a_caveat():
    with pytest.warns(SparseAttentionWarning, match=r"40 tokens exceed index_topk=32"):
        session = A.TriageSession(checkpoint=SAMPLE, layer=1, tokens=40)
    kinds = [c.kind for c in session.caveats]
    assert kinds == [CaveatKind.INDEXER_NOT_MODELLED, CaveatKind.TOKENS_ABOVE_INDEX_TOPK]
    assert (session.caveats[1].tokens, session.caveats[1].index_topk) == (40, 32)


def test_ignored_tensors_are_a_caveat(tmp_path):
    folder = shutil.copytree(SAMPLE, tmp_path / "with-bias")
    save_file({"model.layers.1.self_attn.o_proj.bias": torch.zeros(256)}, str(folder / "bias.safetensors"))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.1.self_attn.o_proj.bias"] = "bias.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"o_proj\.bias'\] are not part of a v3 attention layer"):
        A.TriageSession(checkpoint=folder, layer=1, tokens=8)
    session = A.TriageSession(checkpoint=folder, layer=1, tokens=8, ignore_extra=True)
    assert session.caveats[0] == Caveat(CaveatKind.TENSORS_IGNORED, tensors=("o_proj.bias",))


# -- positions -------------------------------------------------------------------------------------------


def test_start_position_and_explicit_positions():
    session = A.TriageSession("tiny", tokens=8, start_position=5000)
    assert torch.equal(session.positions, torch.arange(5000, 5008))
    explicit = A.TriageSession("tiny", positions=[3, 9, 4096, 4097, 70000])
    assert explicit.tokens == 5 and explicit.positions.tolist() == [3, 9, 4096, 4097, 70000]
    assert TokenPositions.of(explicit.positions) == TokenPositions(start=3, explicit=(3, 9, 4096, 4097, 70000))
    assert TokenPositions.of(session.positions) == TokenPositions(start=5000)


@pytest.mark.parametrize(
    ("options", "error", "pattern"),
    [
        (
            dict(tokens=16, start_position=163830),
            ValueError,
            r"start_position=163830 with 16 tokens puts a token at "
            r"position 163845, past what tiny encodes: max_position_embeddings 163840 \(positions 0\.\.163839\)",
        ),
        (dict(positions=[0, 163840]), ValueError, r"positions with 2 tokens puts a token at position 163840"),
        (dict(tokens=4, positions=[1, 2, 3]), ValueError, r"positions holds 3 values, one per token is 4"),
        (dict(start_position=-1), ValueError, r"start_position=-1 must be >= 0"),
        (dict(start_position=5, positions=[1, 2]), ValueError, r"start_position=5 and positions= both given"),
        (dict(positions=[-2, 1]), ValueError, r"positions: -2 is negative"),
        (dict(positions=[0.5, 1.5]), TypeError, r"positions must be a 1-D sequence of ints"),
        (dict(start_position=2.0), TypeError, r"start_position=2.0 must be an int"),
    ],
    ids=["past-max", "explicit-past-max", "length", "negative-start", "both", "negative", "floats", "float-start"],
)
def test_bad_positions_are_refused_before_the_weights(options, error, pattern, monkeypatch):
    monkeypatch.setattr(md.Checkpoint, "synthetic", lambda *a, **k: pytest.fail("weights built before the check"))
    with pytest.raises(error, match=pattern):
        A.TriageSession("tiny", **options)


def test_positions_are_recorded_in_the_result_report_and_provenance(tmp_path):
    result = A.triage("tiny", tp_sizes=(1,), tokens=8, start_position=5000, progress=False, find_culprits=False)
    assert result.positions == TokenPositions(start=5000)
    assert "8 tokens at positions 5000..5007" in result.provenance.line()
    data = json.loads(result.to_json(tmp_path / "p.json").read_text())
    assert data["schema"] == 6 and data["positions"] == {"start": 5000, "explicit": None}
    back = md.load_triage(tmp_path / "p.json")
    assert back.positions == result.positions and back.provenance == result.provenance
    assert "8 tokens at positions 5000..5007" in md.viz.render_html(back)
