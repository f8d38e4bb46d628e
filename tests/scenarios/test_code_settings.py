"""A setting of kind `code`: a constant in the engine's source (SGLang's _use_aiter_bpreshuffle_gfx95) that a
user changes with a one-line edit - declared, set, resolved like the others, and offered by bisection as a
workaround (facts are not)."""

from __future__ import annotations

import mla_debug as md
from mla_debug.incidents import incidents_folder
from mla_debug.scenarios import SettingKind
from mla_debug.triage.changes import SET_SETTING, candidate_workarounds


def test_a_code_setting_is_settable_and_written_as_an_assignment():
    scen = md.scenario(incidents_folder() / "scenarios" / "sglang-28685.yaml")
    setting = scen.settings["_use_aiter_bpreshuffle_gfx95"]
    assert setting.kind is SettingKind.CODE and setting.kind.settable and not SettingKind.FACT.settable
    assert setting.text("False") == "_use_aiter_bpreshuffle_gfx95 = False"
    as_released = scen.resolve("mi355x")
    edited = scen.with_settings({"_use_aiter_bpreshuffle_gfx95": "False"}).resolve("mi355x")
    assert "aiter-bpreshuffle-gfx950-rocm72" in as_released.priority
    assert "aiter-bpreshuffle-gfx950-rocm72" not in edited.priority and "aiter-blockscale" in edited.priority


def test_bisection_offers_the_code_setting_as_a_workaround():
    scen = md.scenario(incidents_folder() / "scenarios" / "sglang-28685.yaml").resolve("mi355x")
    offered = {c.setting: c.description for c in candidate_workarounds(scen, {}) if c.kind == SET_SETTING}
    assert "_use_aiter_bpreshuffle_gfx95 = False" in offered
    assert "one-line edit of the engine's source" in offered["_use_aiter_bpreshuffle_gfx95 = False"]
    assert not any(name.startswith("hip_version") for name in offered)  # a fact is the machine's
