"""Capture diff and explanation on transformers' DeepSeek-V3 attention with defects planted the way an
engine bug plants them (tests/explain/hf_engine.py): the diff finds the step, the explanation names the
defect, and a clean capture gets no story."""

from __future__ import annotations

import json

import hf_engine  # beside this file: the transformers engine and its planted defects
import pytest
import torch

import mla_debug as md
from mla_debug.explain.diff import ByteRelation, CaptureDiff, Difference, LayoutBase
from mla_debug.explain.explain import CaptureExplanation, Outcome
from mla_debug.explain.stories import StoryKind
from mla_debug.explain.truth import TruthSource


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A new, empty folder for each capture (the recorder never writes over an existing rank folder)."""
    return lambda: tmp_path_factory.mktemp("capture")


@pytest.fixture(scope="module")
def weights():
    return hf_engine.loaded_weights(seed=0)


@pytest.fixture(scope="module")
def tokens():
    return hf_engine.inputs(tokens=8, seed=1)


@pytest.fixture(scope="module")
def clean_tp2(folder, weights, tokens):
    return hf_engine.capture(weights, 2, *tokens, folder())


def shuffle(module_name: str, times: int):
    def plant(module, rank, tp):
        linear = getattr(module, module_name)
        with torch.no_grad():
            data = linear.weight.data
            for _ in range(times):
                data = hf_engine.aiter_shuffle()(data)
            linear.weight.data = data

    return plant


def test_clean_captures_agree_and_get_no_story(folder, weights, tokens, clean_tp2):
    clean_tp4 = hf_engine.capture(weights, 4, *tokens, folder())
    diff = md.diff_captures(clean_tp2, clean_tp4)
    assert diff.truth.source is TruthSource.SIDES_AGREE
    assert diff.diverged_steps == []
    assert all(w.difference is Difference.NONE for w in diff.weights)
    assert {s.step for s in diff.steps} >= {"q_b_proj", "kv_b_proj", "o_proj", "layer"}
    for capture in (clean_tp2, clean_tp4):
        explanation = md.explain_capture(capture)
        assert explanation.stories == [] and explanation.unexplained == [] and explanation.untested == []


def test_weight_shuffled_once_under_a_plain_reader_is_found_and_named(folder, weights, tokens, clean_tp2):
    bad = hf_engine.capture(weights, 4, *tokens, folder(), plant=shuffle("kv_b_proj", 1))
    # At 256-byte rows a (16, 16) shuffle is its own inverse: without a checkpoint, nothing in the bytes says
    # which side holds the plain ones, and the diff says so instead of taking a's as the checkpoint.
    undecided = md.diff_captures(clean_tp2, bad)
    assert undecided.truth.source is TruthSource.UNDECIDED and undecided.truth.disputed == ("kv_b_proj.weight",)
    assert undecided.weight("kv_b_proj.weight").base is LayoutBase.OTHER_SIDE
    assert undecided.first_divergent.step == "kv_b_proj"
    diff = md.diff_captures(clean_tp2, bad, clean_tp2.checkpoint())
    assert diff.first_divergent.step == "kv_b_proj"
    kv_b = diff.weight("kv_b_proj.weight")
    assert kv_b.difference is Difference.LAYOUT
    assert [r.relation for r in kv_b.side("a")] == [ByteRelation.SAME] * 2
    assert [(r.relation, r.shuffles, r.shuffle_layout) for r in kv_b.side("b")] == [
        (ByteRelation.SHUFFLED, 1, (16, 16))
    ] * 4
    explanation = md.explain_capture(bad, clean_tp2.checkpoint())
    step = explanation.of("kv_b_proj")
    assert step.outcome is Outcome.EXPLAINED
    assert step.story == (StoryKind.WEIGHT_RELAID_READ_PLAIN,)
    assert step.best.rel_err < 1e-2 < step.correct.rel_err
    assert [s.step for s in explanation.stories] == ["kv_b_proj"]
    assert explanation.of("o_proj").outcome is Outcome.CORRECT_FROM_INPUTS  # inherited, not a second story


def test_weight_shuffled_twice_is_counted_and_named(folder, weights, tokens, clean_tp2):
    # o_proj per rank at TP2 is (512, 512) bf16: 1024-byte rows, so two shuffles are not the plain bytes.
    bad = hf_engine.capture(weights, 2, *tokens, folder(), plant=shuffle("o_proj", 2))
    diff = md.diff_captures(clean_tp2, bad)
    assert diff.first_divergent.step == "o_proj"
    assert {r.shuffles for r in diff.weight("o_proj.weight").side("b")} == {2}
    step = md.explain_capture(bad, clean_tp2.checkpoint()).of("o_proj")
    assert step.story == (StoryKind.WEIGHT_RELAID_READ_PLAIN,)
    assert {h.shuffles for h in step.held} == {2}


def test_double_shuffle_under_a_preshuffle_aware_reader(folder, weights, tokens, clean_tp2):
    def plant(module, rank, tp):
        reader = hf_engine.PreshuffledLinear(hf_engine.aiter_shuffle()(module.q_b_proj.weight.data))  # the kernel's
        reader.weight.data = hf_engine.aiter_shuffle()(reader.weight.data)  # and the model's own shuffle
        module.q_b_proj = reader

    bad = hf_engine.capture(weights, 2, *tokens, folder(), plant=plant)
    step = md.explain_capture(bad, clean_tp2.checkpoint()).of("q_b_proj")
    assert step.story == (StoryKind.WEIGHT_SHUFFLED_TWICE,)
    assert step.best.weight_unshuffles == 1


def test_a_preshuffle_aware_reader_given_its_weight_shuffled_once_is_correct(folder, weights, tokens, clean_tp2):
    def plant(module, rank, tp):
        module.q_b_proj = hf_engine.PreshuffledLinear(hf_engine.aiter_shuffle()(module.q_b_proj.weight.data))

    fine = hf_engine.capture(weights, 2, *tokens, folder(), plant=plant)
    diff = md.diff_captures(clean_tp2, fine)
    assert diff.diverged_steps == []
    assert diff.weight("q_b_proj.weight").difference is Difference.LAYOUT  # the layout differs, the values do not
    assert md.explain_capture(fine, clean_tp2.checkpoint()).stories == []


@pytest.fixture(scope="module")
def fp8_weights(weights):
    return hf_engine.fp8_checkpoint(weights)


def test_a_row_major_scale_handed_to_a_column_major_reader(folder, weights, fp8_weights, tokens):
    clean = hf_engine.capture(weights, 2, *tokens, folder(), fp8=fp8_weights)
    bad = hf_engine.capture(weights, 2, *tokens, folder(), fp8=fp8_weights, reads={"q_b_proj": "col"})
    assert md.explain_capture(clean).stories == []
    diff = md.diff_captures(clean, bad)
    assert diff.first_divergent.step == "q_b_proj"
    assert all(w.difference is Difference.NONE for w in diff.weights)  # no byte of a weight differs
    step = md.explain_capture(bad, clean.checkpoint()).of("q_b_proj")
    assert step.outcome is Outcome.EXPLAINED
    assert step.story == (StoryKind.ACT_SCALE_ROW_READ_AS_COL,)
    assert step.act_scale_written is md.ScaleLayout.ROW_MAJOR
    assert step.best.rel_err < 1e-2 < 0.1 < step.correct.rel_err


def test_a_whole_scale_beside_chosen_tokens_is_read_whole_and_compared_at_those_tokens(
    folder, weights, fp8_weights, tokens
):
    """A scale handed to `record` is kept whole (a column-major misread mixes every token's scales), while
    the op inputs keep the chosen tokens: the stories read the whole buffer and compare the chosen rows."""
    hidden, positions = tokens
    chosen = [0, 2, 3, 5]
    clean = hf_engine.capture(weights, 2, hidden, positions, folder(), fp8=fp8_weights, tokens=chosen)
    bad = hf_engine.capture(
        weights, 2, hidden, positions, folder(), fp8=fp8_weights, reads={"q_b_proj": "col"}, tokens=chosen
    )
    assert bad.rank(0).tensors["q_b_proj.input"].tensor.shape[0] == len(chosen)
    assert bad.rank(0).tensors["q_b_proj.input_scale"].tensor.shape[0] == hidden.shape[0]
    # Four tokens leave this defect near the noise floor of the diff, so the step is asked for by name.
    assert md.explain_capture(clean, steps=["q_b_proj"]).stories == []
    step = md.explain_capture(bad, clean.checkpoint(), steps=["q_b_proj"]).of("q_b_proj")
    assert step.outcome is Outcome.EXPLAINED
    assert step.story == (StoryKind.ACT_SCALE_ROW_READ_AS_COL,)
    assert step.best.rel_err < 1e-2 < step.correct.rel_err


def test_w_uk_derived_from_relaid_bytes(folder, weights, tokens, clean_tp2):
    cfg = clean_tp2.cfg

    def plant(module, rank, tp):
        # The kernel shuffled kv_b_proj at load (read correctly by it), and the model derived W_UK from
        # the bytes it found: a direct reader of a relaid weight.
        raw = hf_engine.aiter_shuffle()(module.kv_b_proj.weight.data)
        module.kv_b_proj = hf_engine.PreshuffledLinear(raw)
        heads = cfg.num_heads // tp
        module.W_UK = (
            raw.float()
            .view(heads, cfg.qk_nope_head_dim + cfg.v_head_dim, -1)[:, : cfg.qk_nope_head_dim]
            .to(torch.bfloat16)
        )

    bad = hf_engine.capture(weights, 2, *tokens, folder(), plant=plant)
    explanation = md.explain_capture(bad, clean_tp2.checkpoint())
    w_uk = explanation.of("W_UK")
    assert w_uk.outcome is Outcome.EXPLAINED
    assert w_uk.story == (StoryKind.DERIVED_FROM_RELAID, StoryKind.WEIGHT_RELAID_READ_PLAIN)
    assert [s.tensor for s in explanation.stories] == ["W_UK"]  # the prefill steps themselves are right


def test_a_correct_w_uk_gets_no_story(folder, weights, tokens, clean_tp2):
    cfg = clean_tp2.cfg

    def plant(module, rank, tp):
        heads = cfg.num_heads // tp
        w = module.kv_b_proj.weight.data.float().view(heads, cfg.qk_nope_head_dim + cfg.v_head_dim, -1)
        module.W_UK = w[:, : cfg.qk_nope_head_dim].transpose(1, 2).contiguous().to(torch.bfloat16)  # (h, Lkv, P)

    fine = hf_engine.capture(weights, 2, *tokens, folder(), plant=plant)
    explanation = md.explain_capture(fine)
    assert explanation.of("W_UK").outcome is Outcome.CORRECT_FROM_INPUTS
    assert explanation.stories == []


def test_unknown_corruption_says_no_story(folder, weights, tokens, clean_tp2):
    def plant(module, rank, tp):
        with torch.no_grad():
            module.kv_b_proj.weight.data = module.kv_b_proj.weight.data.flip(1).contiguous()

    bad = hf_engine.capture(weights, 2, *tokens, folder(), plant=plant)
    diff = md.diff_captures(clean_tp2, bad)
    assert diff.weight("kv_b_proj.weight").difference is Difference.VALUE
    step = md.explain_capture(bad, clean_tp2.checkpoint()).of("kv_b_proj")
    assert step.outcome is Outcome.NO_STORY


def test_diff_against_the_reference_run_and_json_round_trips(folder, weights, tokens, clean_tp2, tmp_path):
    bad = hf_engine.capture(weights, 2, *tokens, folder(), plant=shuffle("kv_b_proj", 1))
    # Nothing marks the shuffled bytes (a clone lost aiter's is_shuffled), so the checkpoint is given.
    diff = md.diff_captures(bad, reference=True, checkpoint=clean_tp2.checkpoint())
    assert diff.a.engine == "mla_debug-reference" and diff.b.engine == "transformers"
    assert diff.first_divergent.step == "kv_b_proj"
    again = CaptureDiff.load(diff.to_json(tmp_path / "diff.json"))
    assert again == diff
    explanation = md.explain_capture(bad, clean_tp2.checkpoint(), diff=diff)
    loaded = CaptureExplanation.load(explanation.to_json(tmp_path / "explain.json"))
    assert loaded == explanation
    assert json.loads((tmp_path / "explain.json").read_text())["kind"] == "capture-explanation"
    assert list(diff.table.columns)[:3] == ["step", "status", "rel_err"]
    assert set(explanation.table["outcome"]) >= {"explained"}


def test_mismatched_captures_are_refused(folder, weights, tokens, clean_tp2):
    other = hf_engine.capture(weights, 2, tokens[0], tokens[1] + 1, folder())
    with pytest.raises(ValueError, match="positions"):
        md.diff_captures(clean_tp2, other)
