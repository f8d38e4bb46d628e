"""An engine profile's resolution in words: the heading, the settings in effect, the applied rules with
their sources - the same sentences in the terminal and the HTML report, and no section for a scenario
that is no profile."""

from __future__ import annotations

from mla_debug.scenarios import AppliedRule, Engine, Resolution, SettingInEffect, SettingKind, Source
from mla_debug.triage.report import RunReport, TriageReport
from mla_debug.viz import render_html
from mla_debug.viz.profile import profile_heading, profile_html, rule_lines, setting_lines

SOURCE = Source(
    "vllm", "0.33.0", "vllm/model_executor/kernels/linear/scaled_mm/aiter.py", "AiterFp8BlockScaledMMKernel"
)
RESOLUTION = Resolution(
    "mi355x",
    Engine("vLLM", "0.33.0"),
    (
        SettingInEffect("VLLM_ROCM_USE_AITER", SettingKind.ENV, "1", "0", SOURCE),
        SettingInEffect("--optimization-level", SettingKind.ARG, "2", "2", None),
        SettingInEffect("hip_version", SettingKind.FACT, "7.2", "7.2", None),
    ),
    (AppliedRule("rocm-aiter", "aiter's kernel comes first <fast>", SOURCE), AppliedRule("plain", "no source")),
)


def test_the_heading_names_the_engine_the_rule_count_and_what_differs_from_the_defaults():
    assert profile_heading(RESOLUTION) == (
        "vLLM 0.33.0 on mi355x: 2 rules applied; settings VLLM_ROCM_USE_AITER=1 (not the default 0)"
    )
    quiet = Resolution("h200", None, RESOLUTION.settings[1:], RESOLUTION.rules[:1])
    assert profile_heading(quiet) == (
        "a scenario with settings and rules on h200: 1 rule applied; every setting at its default"
    )


def test_settings_are_written_the_way_a_user_sets_them():
    assert setting_lines(RESOLUTION) == [
        "VLLM_ROCM_USE_AITER=1 (environment variable; default 0)",
        "--optimization-level 2 (server argument; the default)",
        "hip_version = 7.2 (fact; the default)",
    ]


def test_rules_carry_their_source():
    assert rule_lines(RESOLUTION) == [
        "rocm-aiter: aiter's kernel comes first <fast> "
        "[vllm 0.33.0 vllm/model_executor/kernels/linear/scaled_mm/aiter.py: AiterFp8BlockScaledMMKernel]",
        "plain: no source",
    ]


def test_the_html_section_escapes_and_is_absent_without_a_profile():
    section = profile_html(RESOLUTION)
    assert section.startswith("<h2>Engine profile</h2>")
    assert "aiter&#x27;s kernel comes first &lt;fast&gt;" in section
    assert "<code>VLLM_ROCM_USE_AITER=1 (environment variable; default 0)</code>" in section
    assert profile_html(None) == ""
    runs = [RunReport(1, "decode", "ok", None, [])]
    with_profile = TriageReport("mini", "mi355x", "vllm-0.33", 8, "cpu", runs, profile=RESOLUTION)
    assert "<h2>Engine profile</h2>" in render_html(with_profile)
    without = TriageReport("mini", "mi355x", "vllm-pr51692", 8, "cpu", runs)
    assert "Engine profile" not in render_html(without)
