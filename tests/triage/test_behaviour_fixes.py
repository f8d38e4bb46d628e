"""Model-side fixes as typed bisection candidates (`triage.changes.BEHAVIOUR_FIXES`): which are offered
for which model family and behaviour, and that bisection finds each one by running it."""

from __future__ import annotations

import pytest
import torch

import mla_debug as md
import mla_debug.triage as A
from mla_debug.triage.changes import BEHAVIOUR, BEHAVIOUR_FIXES, Change, candidate_changes

KV512 = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
V4 = md.MLAConfig.preset("tiny-v4")


def scenario(base: str, name: str, **behaviour):
    return md.scenario({"base": base, "name": name, "behaviour": behaviour})


def behaviour_changes(scen, cfg) -> list[Change]:
    return [c for c in candidate_changes(scen, {}, cfg) if c.kind == BEHAVIOUR]


def new_value(change: Change):
    """The value a behaviour change sets (a bool switched on carries none)."""
    return True if change.value is None else change.value


def test_the_v4_fixes_read_as_before_and_v3_gets_none_by_default():
    v4 = behaviour_changes(md.scenario("vllm-pr51692"), V4)
    assert [(c.target, new_value(c), c.description) for c in v4] == [
        ("v4_ask_consumers", True, "asking wq_b and indexer.wq_b for their scale order"),
        (
            "skip_model_shuffle_if_kernel_preshuffles",
            True,
            "skipping the model's own shuffle of weights the kernel preshuffled",
        ),
    ]
    for name in ("vllm-pr51692", "vllm-pr56433", "vllm-baseline", "reference"):
        assert behaviour_changes(md.scenario(name), KV512) == []


def test_each_fix_is_offered_where_its_behaviour_is_off_the_fixed_value():
    remote = scenario("vllm-pr51692", "r", load_order="remote-kv")
    assert [(c.target, new_value(c)) for c in behaviour_changes(remote, KV512)] == [("load_order", "standard")]
    assert "load_order" not in [c.target for c in behaviour_changes(remote, V4)]  # a V3 fix only
    transposed = scenario("vllm-baseline", "t", v3_fused_norm_quant=True, v3_fused_transpose_scale=True)
    assert [(c.target, new_value(c)) for c in behaviour_changes(transposed, KV512)] == [
        ("v3_fused_transpose_scale", False),
        ("fused_scale_strided", True),  # the transposed scale presented with its bytes' strides (aiter #4506)
    ]
    row_major = scenario("vllm-baseline", "t", v3_fused_norm_quant=True)
    assert [(c.target, new_value(c)) for c in behaviour_changes(row_major, KV512)] == [
        ("v3_fused_transpose_scale", True)
    ]
    # The producer's order means nothing while the producer is off.
    off = scenario("vllm-baseline", "t", v3_fused_transpose_scale=True)
    assert behaviour_changes(off, KV512) == []
    v41 = scenario("vllm-pr56433", "v41", v4_wo_a_is_bmm=False)
    assert [(c.target, new_value(c)) for c in behaviour_changes(v41, V4)] == [("v4_wo_a_is_bmm", True)]
    assert {fix.field for fix in BEHAVIOUR_FIXES} <= set(md.scenarios.ModelBehaviour.__dataclass_fields__)


def test_a_change_sets_its_value_and_round_trips():
    (change,) = behaviour_changes(scenario("vllm-pr51692", "r", load_order="remote-kv"), KV512)
    fixed = change.apply(scenario("vllm-pr51692", "r", load_order="remote-kv"))
    assert fixed.behaviour.load_order == "standard" and fixed.name == "r+load_order=standard"
    assert Change.from_dict(change.to_dict()) == change and change.to_dict()["value"] == "standard"
    # A bool switched on carries no value, so it serializes as before behaviour values existed.
    ask = next(c for c in behaviour_changes(md.scenario("vllm-pr51692"), V4) if c.target == "v4_ask_consumers")
    assert "value" not in ask.to_dict() and Change.from_dict(ask.to_dict()) == ask
    assert ask.apply(md.scenario("vllm-pr51692")).behaviour.v4_ask_consumers is True


def test_shared_linears_follow_the_behaviours_their_load_depends_on():
    """Runs that share loaded linears give a fresh build's records and load history whatever ran before:
    wo_a loaded with is_bmm (kept plain) is not reused for V4.1's reset flag and back, and a run's
    load-order lines stay its own."""
    for model, scenarios in (
        (
            V4,
            [
                md.scenario("vllm-pr56433"),
                scenario("vllm-pr56433", "v41", v4_wo_a_is_bmm=False),
                md.scenario("vllm-pr56433"),
            ],
        ),
        (
            KV512,
            [
                md.scenario("vllm-pr51692"),
                scenario("vllm-pr51692", "std", absorbed_weights_derived="before-kernel-load"),
                scenario("vllm-pr51692", "remote", absorbed_weight_dtype="bf16", load_order="remote-kv"),
                scenario("vllm-baseline", "fused", v3_fused_norm_quant=True, v3_fused_transpose_scale=True),
                md.scenario("vllm-pr51692"),
            ],
        ),
    ):
        shared = A.TriageSession(model, "mi355x", tokens=4)
        fresh = A.TriageSession(model, "mi355x", tokens=4, reuse=False)
        for scen in scenarios:
            for mode in ("prefill", "decode"):
                a, b = shared.run(scen, 2, mode), fresh.run(scen, 2, mode)
                assert list(a.records) == list(b.records)
                for name in a.records:
                    x, y = a.records[name], b.records[name]
                    assert torch.equal(x.output, y.output), (scen.name, mode, name)
                    assert x.violations == y.violations
                    assert (x.kernel, x.weight_layout, x.notes) == (y.kernel, y.weight_layout, y.notes)
                assert a.events == b.events, (scen.name, mode)


def code_fix_targets(culprit) -> list[tuple]:
    return [tuple((c.kind, c.target, new_value(c)) for c in remedy.changes) for remedy in culprit.code_fixes]


def test_bisection_names_the_remote_kv_load_order():
    """SGLang-like (W_UK / W_UV derived before the kernels; kv_b_proj shuffled by a flag-ignoring kernel)
    is clean; the remote-KV order breaks decode, and loading in the standard order restores it (as does
    honouring the flag in the kernel - both are reported)."""
    session = A.TriageSession(KV512, "mi355x", tokens=8)
    sglang_like = dict(absorbed_weights_derived="before-kernel-load")
    clean = A.triage(
        scenario=scenario("vllm-pr51692", "std", **sglang_like), tp_sizes=(2,), session=session, progress=False
    )
    assert clean.culprits == []
    remote = scenario("vllm-pr51692", "remote", **sglang_like, load_order="remote-kv")
    result = A.triage(scenario=remote, tp_sizes=(2,), session=session, progress=False)
    (culprit,) = result.culprits
    assert (culprit.tp, culprit.mode, culprit.step, culprit.layer) == (2, "decode", "absorb_uk", "kv_b_proj")
    assert ((BEHAVIOUR, "load_order", "standard"),) in code_fix_targets(culprit)
    assert ("honour-flags", "aiter-bpreshuffle", True) in [c for fix in code_fix_targets(culprit) for c in fix]
    assert "remote-KV loader" in culprit.explanation


def test_bisection_names_the_v3_producers_scale_order():
    session = A.TriageSession(KV512, "mi355x", tokens=8)
    transposed = scenario("vllm-baseline", "v3-transposed", v3_fused_norm_quant=True, v3_fused_transpose_scale=True)
    result = A.triage(scenario=transposed, tp_sizes=(1,), session=session, progress=False)
    assert {(c.mode, c.step) for c in result.culprits} == {("prefill", "q_b_proj"), ("decode", "q_b_proj")}
    for culprit in result.culprits:
        assert culprit.changes == [
            Change(
                BEHAVIOUR,
                "v3_fused_transpose_scale",
                "the fused q_a_layernorm + quant producer writing ROW_MAJOR scales (transpose_scale=False)",
                value=False,
            )
        ]
        assert "reads ROW_MAJOR activation-scale bytes written COL_MAJOR" in culprit.explanation


@pytest.mark.parametrize("tp", [1])
def test_bisection_names_wo_a_keeping_is_bmm(tp):
    session = A.TriageSession(V4, "mi355x", tokens=8)
    v41 = scenario("vllm-pr56433", "v41", v4_wo_a_is_bmm=False)
    result = A.triage(scenario=v41, tp_sizes=(tp,), session=session, progress=False)
    assert result.culprits
    for culprit in result.culprits:
        assert culprit.step == "wo_a"
        assert ((BEHAVIOUR, "v4_wo_a_is_bmm", True),) in code_fix_targets(culprit)
