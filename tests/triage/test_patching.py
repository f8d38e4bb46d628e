"""Activation patching as a triage check: a step patched from the reference restores everything after it
when the fault is inside that step, and not when there is another fault after it."""

from __future__ import annotations

import json
import math

import pytest

import mla_debug as md
import mla_debug.triage as A
import mla_debug.verdict as V
from mla_debug.triage import PatchVerdict

V4_STEPS_AFTER_WQ_B = ["q_head_norm", "indexer_q", "rope", "attention", "inverse_rope", "wo_a", "wo_b", "all_reduce"]


@pytest.fixture(scope="module")
def kv512_bench():
    """tiny with kv_lora_rank 512: kv_b_proj's per-rank shape is in the tuned table, so under
    vllm-pr51692 the preshuffled kernel re-lays out the weight absorbed decode reads directly."""
    cfg = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
    return A.TriageSession(cfg, "mi355x", tokens=8)


@pytest.fixture(scope="module")
def v4_bench():
    return A.TriageSession("tiny-v4", "mi355x", tokens=8)


def test_patching_a_clean_configuration_from_its_reference_changes_nothing(kv512_bench):
    before = kv512_bench.diff("reference", 2, "decode")
    result = A.patch_steps(kv512_bench, "reference", 2, "decode", ["q_b_proj"], diff=before)
    assert result.verdict is PatchVerdict.RESTORED and result.output_restored
    assert [s.name for s in result.downstream] == [s.name for s in before.steps][4:]
    for step in (*result.patched, *result.downstream):
        assert step.rel_err_before == step.rel_err_after == 0.0 and not step.diverged_after


def test_the_relaid_kv_b_proj_is_read_by_both_absorbed_steps(kv512_bench):
    """vllm-pr51692 at TP4: absorb_uk diverges first. Patching it restores attention, but absorb_uv reads
    the same re-laid bytes (W_UV), so it diverges again; patching both restores the layer output."""
    confirmation = A.confirm_by_patching(kv512_bench, "vllm-pr51692", 4, "decode")
    first = confirmation.first
    assert first.steps == ("absorb_uk",) and first.verdict is PatchVerdict.NOT_RESTORED
    assert first.diverged_before == ["attention", "absorb_uv", "o_proj", "all_reduce"]
    assert first.still_diverged == ["absorb_uv", "o_proj", "all_reduce"] and first.output_restored is False
    assert first.patched[0].rel_err_after == 0.0 and first.patched[0].diverged_before
    attention = first.downstream[0]
    assert attention.name == "attention" and attention.diverged_before and not attention.diverged_after
    assert attention.threshold == max(V.DIVERGENCE_FACTOR * attention.floor, V.MIN_THRESHOLD)
    assert confirmation.restoring_steps == ("absorb_uk", "absorb_uv")
    last = confirmation.attempts[-1]
    assert (
        last.restored
        and last.output_restored
        and [s.name for s in last.downstream] == ["attention", "o_proj", "all_reduce"]
    )
    assert confirmation.verdict is PatchVerdict.NOT_RESTORED  # the verdict on the first divergent step alone


def test_a_fault_inside_the_first_divergent_step_is_restored_by_patching_it(v4_bench):
    """A fused producer writing COL_MAJOR scales that wq_b reads as ROW_MAJOR (nobody asks the
    consumers): wq_b is wrong, and everything after it only inherits the damage."""
    scen = md.scenario(
        {
            "name": "transposed-q-scales",
            "base": "vllm-pr56433",
            "behaviour": {"v4_ask_consumers": False, "v4_fused_transpose_scale": True},
        }
    )
    result = A.patch_steps(v4_bench, scen, 1, "prefill")
    assert result.steps == ("wq_b",) and result.verdict is PatchVerdict.RESTORED
    assert [s.name for s in result.downstream] == V4_STEPS_AFTER_WQ_B
    assert result.diverged_before == [n for n in V4_STEPS_AFTER_WQ_B if n != "indexer_q"]
    assert result.still_diverged == [] and result.output_restored


def test_two_independent_faults_are_not_restored_by_patching_the_first(v4_bench):
    """DeepSeek-V4 at TP1 under vllm-pr51692 has three defects: the indexer misreads the shared q-lora's
    scales, wo_a reads a re-laid weight directly, wo_b's weight is shuffled twice."""
    confirmation = A.confirm_by_patching(v4_bench, "vllm-pr51692", 1, "prefill")
    first = confirmation.first
    assert first.steps == ("indexer_q",) and first.verdict is PatchVerdict.NOT_RESTORED
    assert first.still_diverged == ["wo_a", "wo_b", "all_reduce"]
    assert [attempt.steps for attempt in confirmation.attempts] == [
        ("indexer_q",),
        ("indexer_q", "wo_a"),
        ("indexer_q", "wo_a", "wo_b"),
    ]
    assert confirmation.restoring_steps == ("indexer_q", "wo_a", "wo_b")
    capped = A.confirm_by_patching(v4_bench, "vllm-pr51692", 1, "prefill", max_steps=2)
    assert len(capped.attempts) == 2 and capped.restoring_steps is None


def test_a_step_whose_readers_take_something_else_is_not_patchable(v4_bench):
    result = A.patch_steps(v4_bench, "vllm-pr51692", 1, "prefill", ["q_norm"])
    assert result.verdict is PatchVerdict.NOT_PATCHABLE
    assert result.patched == result.downstream == () and result.output_restored is None


def test_results_are_plain_json(v4_bench):
    confirmation = A.confirm_by_patching(v4_bench, "vllm-pr51692", 1, "prefill")
    text = json.dumps(confirmation.to_dict(), allow_nan=False)
    assert A.PatchConfirmation.from_dict(json.loads(text)) == confirmation
    data = json.loads(text)["attempts"][0]
    assert data["verdict"] == "not-restored" and data["steps"] == ["indexer_q"]
    assert {"name", "index", "rel_err_before", "rel_err_after", "floor", "threshold"} <= set(data["downstream"][0])
    odd = A.StepRecovery("x", 3, math.inf, math.nan, None, 0.1, True, True)
    back = A.StepRecovery.from_dict(json.loads(json.dumps(odd.to_dict(), allow_nan=False)))
    assert back.rel_err_before == math.inf and math.isnan(back.rel_err_after) and back.floor is None


def test_patching_with_and_without_reuse_agrees(kv512_bench):
    fresh = A.TriageSession(kv512_bench.cfg, "mi355x", tokens=8, reuse=False)
    a = A.confirm_by_patching(kv512_bench, "vllm-pr51692", 2, "decode")
    b = A.confirm_by_patching(fresh, "vllm-pr51692", 2, "decode")
    assert a == b


def test_a_configuration_that_does_not_diverge_needs_the_steps_named(kv512_bench):
    with pytest.raises(ValueError, match="does not diverge from the reference: there is no first divergent step"):
        A.patch_steps(kv512_bench, "reference", 1, "prefill")
    with pytest.raises(ValueError, match=r"steps \['absorb_uk'\] are not among the compared steps of TP1 prefill"):
        A.patch_steps(kv512_bench, "reference", 1, "prefill", ["absorb_uk"])


def test_triage_confirms_every_diverged_configuration(v4_bench):
    result = A.triage(scenario="vllm-pr51692", tp_sizes=(1, 8), session=v4_bench, progress=False, find_culprits=False)
    diverged = [(c.tp, c.mode) for c in result.configs if c.verdict == "diverged"]
    assert sorted(result.patching) == sorted(diverged) == [(1, "decode"), (1, "prefill"), (8, "decode"), (8, "prefill")]
    assert result.patching[(8, "prefill")].verdict is PatchVerdict.RESTORED  # at TP8 only the indexer misreads
    assert result.patching[(1, "prefill")].restoring_steps == ("indexer_q", "wo_a", "wo_b")
    # V4 decode runs prefill's program: its confirmation is prefill's, relabelled.
    decode = result.patching[(1, "decode")]
    assert decode.first.mode == "decode" and decode == result.patching[(1, "prefill")].in_mode("decode")
    clean = A.triage(scenario="vllm-pr56433", tp_sizes=(1,), session=v4_bench, progress=False)
    assert clean.patching == {}
    off = A.triage(scenario="vllm-pr51692", tp_sizes=(8,), session=v4_bench, progress=False, patching=False)
    assert off.patching == {}
