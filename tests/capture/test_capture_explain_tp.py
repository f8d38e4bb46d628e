"""The capture diff and explanation on transformers' DeepSeek-V3 under its own tensor parallelism (torchrun,
gloo on CPU, tests/capture/tp_capture_run.py): a bf16 model of four layers, captured at layers 1 and 3 at
TP2 and TP4, clean, then with a load-time defect planted (aiter's (16, 16) shuffle of a weight shard that
transformers' linear keeps reading as a plain matrix) - on every rank of q_a_proj at TP2, on rank 2 only
of kv_b_proj at TP4.

Past the first layer the two TP sizes reach a layer with inputs that already differ (bf16 sums over the
ranks in other orders): the clean pair must still show no divergence and no story, the defects their
story with the rank, and the diff the same forensics and blame whichever capture comes first.
"""

from __future__ import annotations

import pytest
import torch
from capture_models import LAYER, TOKENS, input_ids, run_torchrun, save_tiny_model

import mla_debug as md
from mla_debug.explain.diff import ByteRelation, LayoutBase, StepStatus, StepVerdict
from mla_debug.explain.explain import CaptureExplanation, DivergenceSource, Outcome
from mla_debug.explain.stories import StoryKind
from mla_debug.explain.truth import Truth, TruthSource
from mla_debug.explain.untestable import Untestable
from mla_debug.viz.captures import explanation_lines, explanation_sentence

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

LAYERS = (1, 3)  # the first layer whose input is a hidden state, and a later one
FIRST_PROJECTIONS = ("q_a_proj", "kv_a_proj_with_mqa")


def _aiter_usable() -> bool:
    from mla_debug import real_aiter

    try:
        real_aiter.require_install()
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # kv_lora_rank 256: kv_b_proj's rows are 512 bytes, where a shuffle is not its own inverse.
    folder = tmp_path_factory.mktemp("tiny-deepseek-v3-4") / "model"
    return save_tiny_model(folder, dtype=torch.bfloat16, layers=4, kv_lora_rank=256)


def _captures(model_dir, root, tp: int, plants: tuple[str, ...]):
    """{"clean": {layer: capture}, plant spec: {layer: capture}, ...} from one torchrun launch."""
    extra = ("--layers", ",".join(map(str, LAYERS)))
    if _aiter_usable():
        for spec in plants:
            extra += ("--plant", spec, str(root / spec.replace("@", "-at-")))
    run_torchrun(model_dir, root / "clean", tp, extra=extra)
    found = {}
    for name in ("clean", *plants):
        folder = root / name.replace("@", "-at-")
        if folder.exists():
            found[name] = {layer: md.load_capture(folder / f"layer{layer}") for layer in LAYERS}
    return found


@pytest.fixture(scope="module")
def tp2(model_dir, tmp_path_factory):
    return _captures(model_dir, tmp_path_factory.mktemp("tp2"), 2, ("q_a_proj@all", "o_proj@1"))


@pytest.fixture(scope="module")
def tp4(model_dir, tmp_path_factory):
    return _captures(model_dir, tmp_path_factory.mktemp("tp4"), 4, ("kv_b_proj@2",))


def planted(captures, spec: str):
    if spec not in captures:
        pytest.skip("amd-aiter's shuffle_weight is not usable here: no planted capture")
    return captures[spec]


@pytest.mark.parametrize("layer", LAYERS)
def test_clean_tp2_and_tp4_show_their_inherited_input_and_no_divergence(tp2, tp4, layer):
    a, b = tp2["clean"][layer], tp4["clean"][layer]
    diff = md.diff_captures(a, b)
    assert diff.truth.source is TruthSource.SIDES_AGREE  # no checkpoint: both hold the same weight bytes
    assert not diff.layer_input.identical and diff.layer_input.rel_err > 0
    assert diff.diverged_steps == []
    compared = [s for s in diff.steps if s.status is StepStatus.COMPARED]
    assert {s.verdict for s in compared} <= {StepVerdict.AGREES, StepVerdict.INHERITED}
    for name in FIRST_PROJECTIONS:
        first = diff.step(name)
        # The input's difference explains most of the first projections' (their own rounding is the rest).
        assert 0 < first.inherited and first.residual < first.rel_err and first.residual <= first.threshold
    for capture in (a, b):
        for explanation in (md.explain_capture(capture, diff=diff), md.explain_capture(capture)):
            assert explanation.stories == [] and explanation.unexplained == [] and explanation.untested == []
    asked = md.explain_capture(b, diff=diff, steps=list(FIRST_PROJECTIONS))
    for name in FIRST_PROJECTIONS:
        step = asked.of(name)
        assert step.outcome is Outcome.CORRECT_FROM_INPUTS and step.inherited_from == "layer.input"
        assert "earlier step" not in explanation_sentence(step)


@pytest.mark.parametrize("layer", LAYERS)
def test_a_defect_on_one_rank_is_that_ranks_story(tp2, tp4, layer, tmp_path):
    clean, bad = tp2["clean"][layer], planted(tp4, "kv_b_proj@2")[layer]
    diff = md.diff_captures(clean, bad)
    # No checkpoint: the clean side's bytes are the plain ones (the planted ones are a shuffle of them).
    assert diff.truth.source is TruthSource.SIDE_A
    kv_b = diff.weight("kv_b_proj.weight")
    assert kv_b.base is LayoutBase.SIDE_A
    assert [(r.side, r.rank, r.relation, r.shuffles) for r in kv_b.ranks if r.relation is not ByteRelation.SAME] == [
        ("b", 2, ByteRelation.SHUFFLED, 1)
    ]
    assert [(name, r.side, r.rank) for name, r in diff.suspects] == [("kv_b_proj.weight", "b", 2)]
    step = diff.step("kv_b_proj")
    assert diff.first_divergent.step == "kv_b_proj" and step.verdict is StepVerdict.DIVERGED
    assert max(range(4), key=lambda r: step.rank_errors[r]) == 2  # TP4's rank 2 ...
    assert max(range(2), key=lambda r: step.rank_errors_a[r]) == 1  # ... lies in TP2's rank 1
    explanation = md.explain_capture(bad, clean.checkpoint(), diff=diff, truth=Truth(TruthSource.OTHER_CAPTURE))
    found = explanation.of("kv_b_proj")
    assert found.outcome is Outcome.EXPLAINED
    assert found.story == (StoryKind.WEIGHT_RELAID_READ_PLAIN,) and found.story_ranks == (2,)
    assert [r.outcome for r in found.ranks] == [Outcome.CORRECT_FROM_INPUTS] * 2 + [Outcome.EXPLAINED, Outcome.CORRECT_FROM_INPUTS]
    assert [s.step for s in explanation.stories] == ["kv_b_proj"]
    assert explanation.of("o_proj").outcome is Outcome.CORRECT_FROM_INPUTS  # inherited, not a second story
    assert "on rank 2" in explanation_sentence(found)
    assert CaptureExplanation.load(explanation.to_json(tmp_path / "explanation.json")) == explanation


def test_a_defect_on_one_rank_of_an_output_the_module_all_reduced_is_that_ranks_story(tp2, tp4):
    """transformers' RowwiseParallel sums o_proj's ranks inside the module: every rank holds the sum, and
    the ranks are told apart by hypotheses on it (one rank shuffled, the others correct)."""
    clean, bad = tp4["clean"][LAYER], planted(tp2, "o_proj@1")[LAYER]
    checkpoint = clean.checkpoint()
    diff = md.diff_captures(clean, bad, checkpoint)
    assert diff.first_divergent.step == "o_proj"
    assert [(name, r.side, r.rank) for name, r in diff.suspects] == [("o_proj.weight", "b", 1)]
    found = md.explain_capture(bad, checkpoint, diff=diff, truth=Truth(TruthSource.OTHER_CAPTURE)).of("o_proj")
    assert found.outcome is Outcome.EXPLAINED
    assert found.story == (StoryKind.WEIGHT_RELAID_READ_PLAIN,) and found.story_ranks == (1,)
    assert found.best.on_ranks == (1,) and found.best.rel_err < 1e-2 < found.correct.rel_err


def test_without_a_checkpoint_the_truth_is_named_and_what_depends_on_it_refused(tp2, tp4):
    bad, clean = planted(tp4, "kv_b_proj@2")[LAYER], tp2["clean"][LAYER]
    alone = md.explain_capture(bad)
    # Its own shuffled bytes are all it has to judge by: the defect cannot show, and the result says so.
    assert alone.truth.source is TruthSource.CAPTURE and alone.truth.assumed
    assert alone.stories == []
    assert all(e.assumes_weights for e in alone.explanations if e.outcome is not Outcome.UNTESTABLE)
    assert any("the capture's own weights" in line for line in explanation_lines(alone))
    # A diff that took the other capture's weights as the checkpoint's: this capture's own are not the truth.
    with pytest.raises(ValueError, match="side a's weights"):
        md.explain_capture(bad, diff=md.diff_captures(clean, bad))
    # Two captures each with a defect of its own: nothing decides which weights are right.
    both = md.diff_captures(planted(tp2, "q_a_proj@all")[LAYER], bad)
    assert both.truth.source is TruthSource.UNDECIDED
    assert set(both.truth.disputed) == {"q_a_proj.weight", "kv_b_proj.weight"}
    with pytest.raises(ValueError, match="q_a_proj.weight"):
        md.explain_capture(bad, diff=both)


def _by_capture(diff, a: str, b: str):
    """Each weight's rank relations keyed by capture name (side a is capture `a`), not by side."""
    name = {"a": a, "b": b}
    return {
        (w.name, name[r.side], r.rank): (r.relation, r.shuffles, r.shuffle_layout) for w in diff.weights for r in w.ranks
    }


def test_argument_order_gives_the_same_forensics_and_blames_the_planted_side(tp2, tp4):
    bad, good = planted(tp2, "q_a_proj@all")[LAYER], tp4["clean"][LAYER]
    bad_first, good_first = md.diff_captures(bad, good), md.diff_captures(good, bad)
    assert _by_capture(bad_first, "bad", "good") == _by_capture(good_first, "good", "bad")
    assert (bad_first.truth.source, good_first.truth.source) == (TruthSource.SIDE_B, TruthSource.SIDE_A)
    assert {(name, r.side) for name, r in bad_first.suspects} == {("q_a_proj.weight", "a")}
    assert {(name, r.side) for name, r in good_first.suspects} == {("q_a_proj.weight", "b")}
    assert [(r.rank, r.relation, r.shuffles) for r in good_first.weight("q_a_proj.weight").side("b")] == [
        (0, ByteRelation.SHUFFLED, 1),
        (1, ByteRelation.SHUFFLED, 1),
    ]
    assert bad_first.first_divergent.step == good_first.first_divergent.step == "q_a_proj"
    # The planted capture is explained by its story; the clean one's step is what its inputs give, and
    # its divergence is the other side's - not "an earlier step": q_a_proj reads the layer input.
    story = md.explain_capture(bad, good.checkpoint(), diff=bad_first, truth=Truth(TruthSource.OTHER_CAPTURE))
    assert story.of("q_a_proj").story == (StoryKind.WEIGHT_RELAID_READ_PLAIN,)
    assert story.of("q_a_proj").story_ranks == (0, 1)
    fine = md.explain_capture(good, diff=good_first).of("q_a_proj")
    assert fine.outcome is Outcome.CORRECT_FROM_INPUTS
    assert (fine.inherited_from, fine.source) == ("layer.input", DivergenceSource.OTHER_SIDE)
    sentence = explanation_sentence(fine)
    assert "other side" in sentence and "earlier step" not in sentence


# -- decode --------------------------------------------------------------------------------------------


def _decode_capture(model_dir, out, with_prompt: bool):
    """Layer LAYER's first decode call (TP1, in process): inside one md.capture block with the prompt's
    call (`with_prompt`), or entered after the prompt ran."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        if with_prompt:
            with md.capture(model, out, layer=LAYER, call=1):
                model.generate(input_ids(), max_new_tokens=2, do_sample=False)
        else:
            first = model(input_ids(), use_cache=True)
            with md.capture(model, out, layer=LAYER):
                model(first.logits[:, -1:].argmax(-1), cache=first.past_key_values, position_ids=torch.tensor([[TOKENS]]))
    return md.load_capture(out)


def test_a_decode_call_compares_with_the_reference_given_its_kv_context(model_dir, tmp_path):
    decode = _decode_capture(model_dir, tmp_path / "decode", with_prompt=True)
    assert decode.manifest.mode == "decode"
    diff = md.diff_captures(decode, reference=True)
    assert diff.b.mode == "decode" and diff.diverged_steps == []
    # The steps after attention are compared: the reference attended over the prompt's rows too.
    assert {diff.step(s).status for s in ("o_proj", "layer")} == {StepStatus.COMPARED}
    explanation = md.explain_capture(decode)
    assert explanation.stories == [] and explanation.untested == []


def test_a_decode_call_without_its_kv_context_is_untestable_from_attention_on(model_dir, tmp_path):
    decode = _decode_capture(model_dir, tmp_path / "decode", with_prompt=False)
    assert decode.manifest.mode == "decode"
    diff = md.diff_captures(decode, reference=True)
    assert diff.diverged_steps == []
    for name in ("o_proj", "layer"):
        assert (diff.step(name).status, diff.step(name).untestable) == (StepStatus.UNTESTABLE, Untestable.KV_CONTEXT_MISSING)
    assert diff.step("q_b_proj").verdict is StepVerdict.AGREES  # per-token steps still compare
    explanation = md.explain_capture(decode)
    assert explanation.of("o_proj").outcome is Outcome.CORRECT_FROM_INPUTS  # recomputed from its own input
    assert [(e.step, e.untestable) for e in explanation.untested] == [("layer", Untestable.KV_CONTEXT_MISSING)]
    lines = explanation_lines(explanation)
    assert not any("every step" in line for line in lines)
    assert any("not tested: layer" in line for line in lines)
