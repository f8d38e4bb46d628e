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
from mla_debug.scenarios.scenario_files import parse_scenario
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


# -- whether the release reaches each hazard (the `reachable` key; its evidence is checked against the wheels in
# test_profile_sources.py) ------------------------------------------------------------------------------------

REACH = {
    "vllm-gfx1250-kv-b-proj-preshuffled.yaml": ("latent", True),
    "vllm-gfx1250-v41-wo-a-preshuffled.yaml": ("latent", True),
    "sglang-remote-kv-gfx950.yaml": ("reachable", False),
    "sglang-triton-row-major-scale.yaml": ("what-if", False),
}


@pytest.mark.parametrize("case", CASES, ids=[c.file.removesuffix(".yaml") for c in CASES])
def test_a_hazard_says_whether_its_release_reaches_it(case):
    hazard = md.scenario(HAZARDS / case.file)
    verdict, tp_dependent = REACH[case.file]
    assert (hazard.reachable.verdict.value, hazard.reachable.tp_dependent) == (verdict, tp_dependent)
    assert hazard.reachable.evidence and all(e.source.lines for e in hazard.reachable.evidence)
    # the TP dependence the file claims is the one its triage case shows
    tps = {tp for tp, _ in case.diverged}
    assert (tps != set(case.tp_sizes)) == tp_dependent or len(case.tp_sizes) == 1
    # a what-if says so where a user sees it first
    assert ("what-if" in hazard.description) == hazard.reachable.what_if
    # a scenario built on a hazard makes no claim of its own
    fields = parse_scenario(md.Scenario, {"name": "mine", "base": "hazard"}, None, lambda name: hazard)
    assert fields["reachable"] is None and fields["rules"] == hazard.rules
    assert md.Scenario.from_dict(hazard.to_dict()).reachable == hazard.reachable


def test_nothing_in_vllm_0_33_marks_kv_b_proj_for_a_direct_read():
    """The kv_b_proj hazard's premise: the flag PR #56433 added is in no file of the release."""
    from engine_wheels import _zip, require

    require("vllm")
    archive = _zip("vllm")
    named = [m for m in archive.namelist() if m.endswith(".py") and b"skip_weight_relayout" in archive.read(m)]
    assert named == []


def test_kv_b_proj_is_never_on_sglangs_triton_list_so_remote_kv_fails_at_every_tp():
    from mla_debug.kernels.engine_rules import SGLANG_TRITON_SHAPES

    assert all(k != 512 for _, k in SGLANG_TRITON_SHAPES)  # kv_b_proj's K is kv_lora_rank = 512 at every TP


def test_a_reachable_key_is_validated():
    base = {"name": "h", "base": "vllm-0.33"}
    evidence = [{"says": "x", "source": {"package": "vllm", "version": "0.33.0", "file": "f.py", "function": "g"}}]
    reach = {"verdict": "latent", "tp_dependent": True, "says": "x", "evidence": evidence}
    with pytest.raises(ValueError, match="cites no lines"):
        md.scenario({**base, "reachable": reach})
    with pytest.raises(ValueError, match="reachable.verdict 'maybe' is not one of reachable, latent, what-if"):
        md.scenario({**base, "reachable": {**reach, "verdict": "maybe"}})
    with pytest.raises(ValueError, match="reachable lacks tp_dependent"):
        md.scenario({**base, "reachable": {k: v for k, v in reach.items() if k != "tp_dependent"}})
