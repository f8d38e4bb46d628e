"""A checkpoint with ``rope_interleave: false`` under vLLM 0.33, which pairs RoPE dimensions interleaved
whatever the config says: triage finds the divergence at the rope step at every TP size, and bisection
names the fix - pairing as the config says - which is tried for such checkpoints only."""

from __future__ import annotations

import mla_debug as md
import mla_debug.triage as A
from mla_debug.triage.changes import BEHAVIOUR, candidate_changes

HALVES = md.MLAConfig.preset("tiny").with_(name="tiny-halves", rope_interleave=False)
INTERLEAVED = md.MLAConfig.preset("tiny")


def behaviour_targets(scen, cfg) -> list[str]:
    return [c.target for c in candidate_changes(scen.resolve("mi355x"), {}, cfg) if c.kind == BEHAVIOUR]


def test_the_pairing_fix_is_offered_for_a_halves_checkpoint_under_vllm_only():
    assert behaviour_targets(md.scenario("vllm-0.33"), HALVES) == ["honours_rope_interleave"]
    assert behaviour_targets(md.scenario("vllm-0.33"), INTERLEAVED) == []
    assert behaviour_targets(md.scenario("sglang-0.5.23"), HALVES) == []


def test_triage_names_the_rope_step_and_the_pairing_fix():
    session = A.TriageSession(HALVES, "mi355x", tokens=8)
    result = A.triage(scenario="vllm-0.33", tp_sizes=(1,), modes=("prefill",), session=session, progress=False)
    (culprit,) = result.culprits
    assert (culprit.tp, culprit.mode, culprit.step) == (1, "prefill", "rope")
    fixes = [tuple((c.kind, c.target) for c in remedy.changes) for remedy in culprit.code_fixes]
    assert ((BEHAVIOUR, "honours_rope_interleave"),) in fixes
    clean = A.triage(scenario="sglang-0.5.23", tp_sizes=(1,), modes=("prefill",), session=session, progress=False)
    assert clean.culprits == []
