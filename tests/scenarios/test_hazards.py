"""The shipped hazard files (data/engines/hazards/*.yaml): each is its release profile with one thing changed,
reproduces its divergence by mechanics in a triage (the configurations that diverge, the first divergent
step, the culprit layer and what it names as the cause, the change that restores it), while the release
profile under the same settings is clean on the same model and platform.

Each case uses the smallest model whose per-rank shapes reach the hazard: "mini" has DeepSeek-V3's heads
and kv_lora_rank, so its kv_b_proj shards are DeepSeek-V3's; the SGLang Triton list names DeepSeek-V3's
full-width shapes, so that case runs deepseek-v3 at one TP size on a few tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

import mla_debug as md
from mla_debug.layouts import ViolationKind
from mla_debug.triage.changes import BEHAVIOUR, HONOUR_FLAGS, SET_SETTING

HAZARDS = Path(__file__).resolve().parents[2] / "data" / "engines" / "hazards"


@dataclass(frozen=True)
class Hazard:
    file: str
    model: str
    platform: str
    tp_sizes: tuple[int, ...]
    diverged: frozenset[tuple[int, str]]  # every (tp, mode) that must diverge; the rest must be ok
    first_step: str
    layer: str
    violation: ViolationKind
    # (kind, target) of a verified code fix that restores, and the setting a workaround changes (if any)
    code_fix: tuple[str, str] | None
    workaround_setting: str | None
    tokens: int = 8
    release_settings: dict[str, str] = field(default_factory=dict)


CASES = [
    Hazard(
        "vllm-gfx1250-kv-b-proj-preshuffled.yaml",
        "mini",
        "gfx1250",
        (4, 8),
        frozenset({(8, "decode")}),
        "absorb_uk",
        "kv_b_proj",
        ViolationKind.RELAID_WEIGHT_DIRECT_READ,
        (HONOUR_FLAGS, "aiter-triton-bpreshuffle"),
        "VLLM_ROCM_USE_AITER",
        release_settings={"VLLM_ROCM_USE_AITER": "1"},
    ),
    Hazard(
        "vllm-gfx1250-v41-wo-a-preshuffled.yaml",
        "deepseek-v4.1",
        "gfx1250",
        (2, 4),
        frozenset({(4, "prefill"), (4, "decode")}),
        "wo_a",
        "wo_a",
        ViolationKind.RELAID_WEIGHT_DIRECT_READ,
        (BEHAVIOUR, "v4_wo_a_is_bmm"),
        "VLLM_ROCM_USE_AITER",
        tokens=4,
        release_settings={"VLLM_ROCM_USE_AITER": "1"},
    ),
    Hazard(
        "sglang-remote-kv-gfx950.yaml",
        "mini",
        "mi355x",
        (1, 8),
        frozenset({(1, "decode"), (8, "decode")}),
        "absorb_uk",
        "kv_b_proj",
        ViolationKind.RELAID_WEIGHT_DIRECT_READ,
        (BEHAVIOUR, "load_order"),
        "SGLANG_USE_AITER",
        release_settings={"SGLANG_USE_AITER": "1", "hip_version": "7.2"},
    ),
    Hazard(
        "sglang-triton-row-major-scale.yaml",
        "deepseek-v3",
        "mi355x",
        (1,),
        frozenset({(1, "prefill"), (1, "decode")}),
        "fused_qkv_a",
        "fused_qkv_a_proj",
        ViolationKind.SCALE_ORDER,
        None,  # the producer is the fault: bisection localises it by reference swaps, the workaround restores
        "SGLANG_USE_AITER",
        tokens=4,
        release_settings={"SGLANG_USE_AITER": "1", "hip_version": "7.2"},
    ),
]


def test_every_shipped_hazard_has_a_case():
    assert sorted(c.file for c in CASES) == sorted(p.name for p in HAZARDS.glob("*.yaml"))


@pytest.mark.parametrize("case", CASES, ids=[c.file.removesuffix(".yaml") for c in CASES])
def test_a_hazard_is_its_release_profile_with_one_thing_changed(case):
    path = HAZARDS / case.file
    hazard = md.scenario(path)
    release = md.scenario(yaml.safe_load(path.read_text())["base"]).with_settings(case.release_settings)
    assert hazard.engine == release.engine and hazard.rules == release.rules
    assert hazard.resolve(case.platform).effective_fields() != release.resolve(case.platform).effective_fields()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.file.removesuffix(".yaml") for c in CASES])
def test_a_hazard_reproduces_its_divergence_and_the_release_is_clean(case):
    common = dict(tp_sizes=case.tp_sizes, tokens=case.tokens, device="cpu", progress=False)
    result = md.triage(case.model, case.platform, md.scenario(HAZARDS / case.file), **common)
    verdicts = {(c.tp, c.mode): c.verdict for c in result.configs}
    assert {key for key, verdict in verdicts.items() if verdict == "diverged"} == case.diverged
    assert all(verdict == "ok" for key, verdict in verdicts.items() if key not in case.diverged)
    for tp, mode in case.diverged:
        config = result.config(tp, mode)
        assert config.diff.first_divergent_step == case.first_step
        kinds = {v.kind for v in config.diff.run.records[case.first_step].violations if v.effective}
        assert case.violation in kinds
    culprits = {(c.tp, c.mode): c for c in result.culprits}
    assert set(culprits) == case.diverged
    for culprit in culprits.values():
        assert culprit.step == case.first_step and culprit.layer == case.layer
        fixes = [{(change.kind, change.target) for change in fix.changes} for fix in culprit.code_fixes]
        if case.code_fix is not None:
            assert any(fix == {case.code_fix} for fix in fixes), fixes
        settings = {c.target for w in culprit.workarounds for c in w.changes if c.kind == SET_SETTING}
        assert case.workaround_setting in settings

    release = md.scenario(yaml.safe_load((HAZARDS / case.file).read_text())["base"])
    clean = md.triage(case.model, case.platform, release.with_settings(case.release_settings), **common)
    assert all(c.verdict == "ok" for c in clean.configs) and clean.culprits == []
