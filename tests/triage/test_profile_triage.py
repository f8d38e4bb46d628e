"""Triage under an engine profile: the runs and every bisection change act on the resolved scenario; a
declared environment variable or server argument set to another allowed value is a workaround candidate
(verified by running it, with the text to paste); the report keeps the resolution and round-trips."""

from __future__ import annotations

import pytest
from toy_profile import profile

import mla_debug as md
import mla_debug.triage as A
from mla_debug.triage.changes import SET_SETTING, apply_all, setting_changes

KV512 = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)


@pytest.fixture(scope="module")
def session():
    return A.TriageSession(KV512, "mi355x", tokens=8)


@pytest.fixture(scope="module")
def toy() -> md.Scenario:
    return md.Scenario.from_dict(profile()).with_settings({"USE_AITER": "1"})


@pytest.fixture(scope="module")
def result(session, toy):
    return A.triage(scenario=toy, tp_sizes=(2,), modes=("decode",), session=session, progress=False)


def test_the_triage_ran_the_resolution_and_records_it(result, toy):
    assert result.scenario == "toy-engine"
    assert result.profile == toy.resolve("mi355x").resolution
    assert [r.id for r in result.profile.rules] == ["rocm-list", "rocm-preshuffle", "fused-producer"]
    kernels = {choice.kernel for choice in result.config(2, "decode").run.kernels.values()}
    assert "aiter-bpreshuffle" in kernels
    assert result.provenance.scenario["engine"] == {"name": "vLLM", "version": "0.33.0"}


def test_setting_workarounds_are_offered_verified_and_pasteable(result, session, toy):
    (culprit,) = result.culprits
    settings = {r.setting: r for r in culprit.workarounds if r.changes[0].kind == SET_SETTING}
    assert set(settings) == {"USE_AITER=0", "USE_PRESHUFFLE=0"}
    # A vLLM profile keeps the kernel disable, the first candidate.
    assert culprit.workarounds[0].setting == "VLLM_DISABLED_KERNELS=AiterPreshuffledFp8BlockScaledMMKernel"
    change = settings["USE_PRESHUFFLE=0"].changes[0]
    assert (change.target, change.value, change.remedy) == ("USE_PRESHUFFLE", "0", A.RemedyKind.WORKAROUND)
    # What a user would do, run independently of bisection: set it and triage again.
    user = toy.with_settings({"USE_PRESHUFFLE": "0"})
    assert not session.diff(user, 2, "decode").diverged


def test_a_fact_or_a_value_that_changes_nothing_is_not_offered(toy):
    resolved = toy.resolve("mi355x")
    offered = {(c.target, c.value) for c in setting_changes(resolved)}
    assert ("hip", "7.0") not in offered  # a fact: the machine's, not a user's to set
    assert ("--level", "1") not in offered  # level 1 applies the same rules as level 2
    assert ("--level", "0") in offered
    assert setting_changes(md.scenario("vllm-pr51692")) == []


def test_setting_changes_apply_first_so_field_changes_survive(toy):
    resolved = toy.resolve("mi355x")
    swap = A.Change("kernel-to-reference", "kv_b_proj", "swap")
    setting = A.Change(SET_SETTING, "USE_PRESHUFFLE", "setting USE_PRESHUFFLE=0", "USE_PRESHUFFLE=0", "0")
    both = apply_all(resolved, [swap, setting])
    assert both.overrides == {"kv_b_proj": "torch-reference"}
    assert both.priority == ("aiter-blockscale", "torch-reference")
    assert both.name == "toy-engine[USE_PRESHUFFLE=0]+kv_b_proj"
    with pytest.raises(ValueError, match="changed after it was resolved"):
        setting.apply(swap.apply(resolved))


def test_another_engine_gets_no_vllm_kernel_disables(session):
    sglang_like = md.Scenario.from_dict(profile(engine={"name": "SGLang", "version": "0.5.23"}))
    result = A.triage(
        scenario=sglang_like.with_settings({"USE_AITER": "1"}),
        tp_sizes=(2,),
        modes=("decode",),
        session=session,
        progress=False,
    )
    (culprit,) = result.culprits
    assert culprit.workarounds and all(r.changes[0].kind == SET_SETTING for r in culprit.workarounds)


def test_the_report_keeps_the_profile_and_round_trips(result, tmp_path):
    report = result.report()
    assert report.profile == result.profile
    data = report.to_dict()
    assert data["schema"] == 6 and data["profile"] is not None  # profiles since schema 4
    assert data["profile"]["rules"][0] == {
        "id": "rocm-list",
        "says": "aiter's plain GEMM first when aiter is on",
        "source": {"package": "vllm", "version": "0.33.0", "file": "vllm/envs.py", "function": "VLLM_ROCM_USE_AITER"},
    }
    again = A.TriageReport.from_dict(data)
    assert again == report and again.to_dict() == data
    set_change = next(c for c in data["culprits"][0]["workarounds"] if c["changes"][0]["kind"] == SET_SETTING)
    assert set_change["changes"][0]["value"] == "0"
    # A schema 3 file (before profiles) loads with none.
    older = dict(data, schema=3)
    del older["profile"]
    assert A.TriageReport.from_dict(older).profile is None
    assert A.TriageReport.from_dict(older).source_schema == 3
