"""The capture diff and explanation in words (viz/captures.py) say what the typed results hold: where a
step's difference comes from, which ranks a story is on, which weights were judged against, and never
that every step is right while one was not tested."""

from __future__ import annotations

from mla_debug.explain.diff import StepComparison, StepStatus, StepVerdict
from mla_debug.explain.explain import Candidate, CaptureExplanation, DivergenceSource, StepExplanation
from mla_debug.explain.ranks import CORRECT, Outcome, RankOutcome
from mla_debug.explain.stories import StoryKind
from mla_debug.explain.truth import Truth, TruthSource
from mla_debug.explain.untestable import Untestable
from mla_debug.viz.captures import explanation_lines, explanation_sentence, step_line

RIGHT = Candidate(1, CORRECT, 1e-3, (1e-3,))


def correct_step(step: str, inherited_from: str, source: DivergenceSource | None) -> StepExplanation:
    return StepExplanation(
        step, Outcome.CORRECT_FROM_INPUTS, (RIGHT,), 0.05, f"{step}.weight", inherited_from=inherited_from, source=source
    )


def test_a_first_projection_inherits_from_the_layer_input_not_an_earlier_step():
    inherited = explanation_sentence(correct_step("q_a_proj", "layer.input", DivergenceSource.LAYER_INPUT))
    assert "layer input" in inherited and "earlier step" not in inherited
    other = explanation_sentence(correct_step("q_a_proj", "layer.input", DivergenceSource.OTHER_SIDE))
    assert "the layer input agrees" in other and "other side" in other
    later = explanation_sentence(correct_step("q_b_proj", "q_a_layernorm", DivergenceSource.EARLIER_STEP))
    assert "q_a_layernorm's output" in later


def test_a_story_on_one_rank_is_said_with_its_rank():
    story = (StoryKind.WEIGHT_RELAID_READ_PLAIN,)
    ranks = tuple(
        RankOutcome(r, Outcome.EXPLAINED, story, 0.0, 1.4) if r == 2 else RankOutcome(r, Outcome.CORRECT_FROM_INPUTS, CORRECT, 1e-3, 1e-3)
        for r in range(4)
    )
    candidates = (Candidate(1, story, 0.0, (0.0,), 0, on_ranks=(2,)), Candidate(2, CORRECT, 1.4, (1e-3, 1e-3, 1.4, 1e-3)))
    found = StepExplanation("kv_b_proj", Outcome.EXPLAINED, candidates, 0.05, "kv_b_proj.weight", ranks=ranks)
    assert found.story == story and found.story_ranks == (2,)
    sentence = explanation_sentence(found)
    assert "on rank 2" in sentence and "the other ranks are what their inputs give" in sentence


def test_the_summary_never_calls_every_step_right_while_one_was_not_tested():
    untested = StepExplanation("attention", Outcome.UNTESTABLE, untestable=Untestable.KV_CONTEXT_MISSING)
    lines = explanation_lines(CaptureExplanation((untested,), truth=Truth(TruthSource.CHECKPOINT)))
    assert not any("every step" in line for line in lines)
    assert "no layout story among the steps tested; not tested: attention" in lines
    assert any("keys of earlier positions" in line for line in lines)
    clean = explanation_lines(CaptureExplanation((), truth=Truth(TruthSource.CHECKPOINT)))
    assert clean == ["no layout story: every step and derived weight tested is what its captured inputs give"]


def test_the_weights_judged_against_are_named_unless_a_checkpoint_was_given():
    own = explanation_lines(CaptureExplanation((), truth=Truth(TruthSource.CAPTURE)))
    assert any("the capture's own weights" in line and "--checkpoint" in line for line in own)
    given = explanation_lines(CaptureExplanation((), truth=Truth(TruthSource.CHECKPOINT)))
    assert not any("judged against" in line for line in given)


def test_an_inherited_step_and_an_untestable_one_in_the_diffs_words():
    inherited = StepComparison(
        "q_a_proj", StepStatus.COMPARED, rel_err=9e-3, threshold=7e-3, verdict=StepVerdict.INHERITED, inherited=8.9e-3, residual=2e-3
    )
    assert "explains 8.90e-03 of it, leaving 2.00e-03 ok: inherited from the layer input" in step_line(inherited)
    untestable = StepComparison("o_proj", StepStatus.UNTESTABLE, untestable=Untestable.KV_CONTEXT_MISSING)
    assert step_line(untestable).startswith("o_proj: not compared - the call attended to keys")
