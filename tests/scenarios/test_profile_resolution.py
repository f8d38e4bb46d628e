"""Resolving an engine profile: the rules that hold on a platform under the settings in effect apply in
order (priority replaced, disabled accumulated, options and behaviour merged), the resolved scenario is
plain and records what applied, and everything that runs a scenario resolves it first."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from toy_profile import PROFILE, profile

import mla_debug as md
from mla_debug.scenarios import ModelBehaviour, SettingKind

EMBEDDED = md.kernels.TunedTable.embedded()


@pytest.fixture
def toy() -> md.Scenario:
    return md.Scenario.from_dict(profile())


def applied(scen: md.Scenario) -> list[str]:
    return [r.id for r in scen.resolution.rules]


def test_defaults_on_mi355x_apply_only_the_rules_that_hold(toy):
    resolved = toy.resolve("mi355x")
    assert applied(resolved) == ["fused-producer"]
    assert resolved.priority == ("torch-reference",)
    assert resolved.behaviour == ModelBehaviour(v4_fused_norm_quant=True)
    assert resolved.rules == () and resolved.resolution.platform == "mi355x"
    assert resolved.resolution.engine == toy.engine
    assert {s.name: s.value for s in resolved.resolution.settings} == {
        "USE_AITER": "0",
        "USE_PRESHUFFLE": "1",
        "--level": "2",
        "hip": "7.2",
    }
    assert resolved.resolution.changed_settings == ()


def test_rules_apply_in_order_and_disabled_accumulates(toy):
    resolved = toy.with_settings({"USE_AITER": "1"}).resolve("mi355x")
    assert applied(resolved) == ["rocm-list", "rocm-preshuffle", "fused-producer"]
    assert resolved.priority == ("aiter-bpreshuffle", "aiter-blockscale", "torch-reference")
    assert resolved.disabled == ("triton-blockscale", "triton-bpreshuffle")
    assert resolved.kernel_options == {"aiter-bpreshuffle": {"honour_layer_flags": False}}
    (changed,) = resolved.resolution.changed_settings
    assert (changed.name, changed.kind, changed.value, changed.default, changed.text) == (
        "USE_AITER",
        SettingKind.ENV,
        "1",
        "0",
        "USE_AITER=1",
    )
    # The policy every run uses is that of the resolution.
    policy = toy.with_settings({"USE_AITER": "1"}).policy("mi355x", tuned=EMBEDDED)
    assert policy.priority == list(resolved.priority) and policy.disabled == set(resolved.disabled)


@pytest.mark.parametrize(
    ("platform", "sets", "rules", "priority"),
    [
        ("mi300x", {"USE_AITER": "1"}, ["rocm-list"], ("aiter-blockscale", "torch-reference")),
        ("mi308x", {"USE_AITER": "1", "--level": "0"}, ["rocm-list"], ("aiter-blockscale", "torch-reference")),
        ("mi308x", {"--level": "1"}, ["fused-producer"], ("torch-reference",)),
        ("mi355x", {"USE_AITER": "1", "USE_PRESHUFFLE": "0"}, ["rocm-list", "fused-producer"], None),
        ("h200", {"USE_AITER": "1"}, ["nvidia"], ("cublas-blockwise", "torch-reference")),
        ("cpu", {"USE_AITER": "1"}, [], ("torch-reference",)),
    ],
)
def test_conditions_on_vendor_arch_platform_and_settings(toy, platform, sets, rules, priority):
    resolved = toy.with_settings(sets).resolve(platform)
    assert applied(resolved) == rules
    if priority is not None:
        assert resolved.priority == priority
    if platform == "h200":
        assert resolved.overrides == {"kv_b_proj": "torch-reference"}


def test_a_plain_scenario_is_its_own_resolution_and_a_resolved_one_is_not_resolved_again(toy):
    builtin = md.scenario("vllm-pr51692")
    assert builtin.resolve("mi355x") is builtin and builtin.resolution is None
    once = toy.resolve("mi355x")
    assert once.resolve("mi355x") is once
    with pytest.raises(ValueError, match=r"was resolved on mi355x; resolve its profile \(scenario.origin\) on h200"):
        once.resolve("h200")
    assert once.origin == toy and once.resolved_on == md.platform("mi355x")


def test_settings_set_on_a_resolved_scenario_re_resolve_its_profile(toy):
    resolved = toy.resolve("mi355x")
    again = resolved.with_settings({"USE_AITER": "1"})
    assert again == toy.with_settings({"USE_AITER": "1"}).resolve("mi355x")
    changed = replace(resolved, disabled=("aiter-blockscale",))
    with pytest.raises(ValueError, match="changed after it was resolved on mi355x; set settings before other changes"):
        changed.with_settings({"USE_AITER": "1"})


def test_a_profile_round_trips_through_plain_data_and_yaml(toy):
    data = toy.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert yaml.safe_load(yaml.safe_dump(data)) == data
    again = md.Scenario.from_dict(data)
    assert again == toy and again.to_dict() == data
    set_one = toy.with_settings({"USE_AITER": "1", "hip": "7.0"})
    data = set_one.to_dict()
    assert data["settings"]["USE_AITER"]["value"] == "1" and "value" not in data["settings"]["USE_PRESHUFFLE"]
    assert md.Scenario.from_dict(data) == set_one


def test_a_resolved_profile_writes_a_plain_scenario_that_resolves_to_the_same_fields(toy):
    resolved = toy.with_settings({"USE_AITER": "1"}).resolve("mi355x")
    data = resolved.to_dict()
    assert "rules" not in data and data["engine"] == {"name": "vLLM", "version": "0.33.0"}
    again = md.Scenario.from_dict(data).resolve("mi355x")
    keys = ("priority", "disabled", "overrides", "kernel_options", "behaviour")
    assert [getattr(again, k) for k in keys] == [getattr(resolved, k) for k in keys]
    assert again.resolution.rules == () and again.resolution.settings == resolved.resolution.settings


def test_the_layer_builder_runs_the_resolution(toy):
    cfg = md.MLAConfig.preset("tiny")
    ckpt = md.Checkpoint.synthetic(cfg, seed=0)
    layer = md.MLALayer(cfg, ckpt, 1, "mi355x", toy.with_settings({"USE_AITER": "1"}))
    assert layer.builder.scenario.resolution is not None
    assert layer.builder.policy.priority == ["aiter-bpreshuffle", "aiter-blockscale", "torch-reference"]


@settings(max_examples=40, deadline=None)
@given(
    aiter=st.sampled_from(["0", "1"]),
    preshuffle=st.sampled_from(["0", "1"]),
    level=st.sampled_from(["0", "1", "2"]),
    platform=st.sampled_from(["cpu", "mi300x", "mi308x", "mi355x", "h200"]),
)
def test_resolution_is_the_rules_that_hold_applied_in_order(aiter, preshuffle, level, platform):
    """Against a direct reading of the toy profile's rules: what applies is exactly what holds, in order,
    and the resolution survives to_dict/from_dict of the set scenario."""
    scen = md.Scenario.from_dict(profile()).with_settings({"USE_AITER": aiter, "USE_PRESHUFFLE": preshuffle})
    scen = scen.with_settings({"--level": level})
    plat = md.platform(platform)
    values = {"USE_AITER": aiter, "USE_PRESHUFFLE": preshuffle, "--level": level, "hip": "7.2"}

    def holds(rule: dict) -> bool:
        when = rule.get("when", {})
        names = lambda key: [when[key]] if isinstance(when.get(key), str) else when.get(key)  # noqa: E731
        if "vendor" in when and plat.vendor not in names("vendor"):
            return False
        if "arch" in when and plat.arch not in names("arch"):
            return False
        if "platform" in when and plat.name not in names("platform"):
            return False
        for name, accepted in when.get("settings", {}).items():
            if values[name] not in ([accepted] if isinstance(accepted, str) else accepted):
                return False
        return True

    expected = [r["id"] for r in PROFILE["rules"] if holds(r)]
    resolved = scen.resolve(plat)
    assert applied(resolved) == expected
    priority = next(
        (r["then"]["priority"] for r in reversed(PROFILE["rules"]) if holds(r) and "priority" in r["then"]), None
    )
    assert resolved.priority == tuple(priority or PROFILE["priority"])
    assert md.Scenario.from_dict(scen.to_dict()).resolve(plat) == resolved
