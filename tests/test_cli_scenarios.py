"""`mla-debug scenarios` (the named scenarios and profiles), `scenarios show` (what one resolves to on a
platform) and `--set NAME=VALUE` on the subcommands that take --scenario."""

from __future__ import annotations

import pytest
import yaml
from toy_profile import profile

from mla_debug.cli.main import main
from mla_debug.scenarios.shipped_data import ENV_VAR


@pytest.fixture
def toy_data(tmp_path, monkeypatch):
    engines = tmp_path / "engines"
    engines.mkdir()
    (engines / "toy-engine.yaml").write_text(yaml.safe_dump(profile(), sort_keys=False))
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), err


def test_scenarios_lists_the_seed_scenarios_and_the_profiles(capsys, toy_data):
    for argv in (["scenarios"], ["scenarios", "list"]):
        code, out, _ = run(capsys, *argv)
        assert code == 0
        assert "vllm-pr51692 seed scenario vLLM PR #51692" in out
        assert "toy-engine engine profile vLLM 0.33.0: a toy engine" in out
        assert f"engine profiles are read from {toy_data / 'engines'}" in out


def test_a_profile_that_cannot_be_read_is_listed_with_the_reason(capsys, toy_data):
    (toy_data / "engines" / "broken.yaml").write_text("name: broken\npriority: [nope]\n")
    code, out, _ = run(capsys, "scenarios")
    assert code == 0 and "broken engine profile cannot be read: scenario file" in out
    assert "unknown kernel 'nope'" in out


def test_show_prints_the_settings_the_rules_with_sources_and_the_kernel_priority(capsys, toy_data):
    code, out, _ = run(capsys, "scenarios", "show", "toy-engine", "--platform", "mi355x", "--set", "USE_AITER=1")
    assert code == 0
    assert "vLLM 0.33.0 on mi355x: 3 rules applied; settings USE_AITER=1 (not the default 0)" in out
    assert "USE_AITER=1 (environment variable; default 0): aiter on ROCm" in out
    assert "--level 2 (server argument; the default): a server argument" in out
    assert "hip = 7.2 (fact; the default): a fact" in out
    assert (
        "rocm-preshuffle: the preshuffled GEMM first, layer flags ignored "
        "[vllm 0.33.0 vllm/envs.py: VLLM_ROCM_USE_AITER]" in out
    )
    assert "kernel priority: aiter-bpreshuffle, aiter-blockscale, torch-reference" in out
    assert "disabled kernels: triton-blockscale, triton-bpreshuffle" in out
    assert "kernel options: aiter-bpreshuffle {'honour_layer_flags': False}" in out
    assert "model behaviour (fields not at their default): v4_fused_norm_quant=True" in out


def test_show_of_a_seed_scenario_says_it_is_used_as_it_is(capsys):
    code, out, _ = run(capsys, "scenarios", "show", "vllm-pr51692", "--platform", "mi355x")
    assert code == 0
    assert "on mi355x: no engine, settings or rules; the scenario is used as it is" in out
    assert "kernel priority: aiter-bpreshuffle, aiter-blockscale, torch-reference (the platform's default order)" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "USE_AITER"], "--set USE_AITER: expected NAME=VALUE, e.g. --set VLLM_ROCM_USE_AITER=1"),
        (["--set", "USE_AITER=1", "--set", "USE_AITER=0"], "--set USE_AITER=0: USE_AITER is set twice"),
        (["--set", "USE_AITR=1"], "settings: USE_AITR is not a declared setting; declared: USE_AITER,"),
        (["--set", "USE_AITER=2"], "setting USE_AITER = '2' is not allowed; allowed values: 0, 1"),
    ],
)
def test_bad_settings_are_one_line_errors(capsys, toy_data, argv, message):
    code, _, err = run(capsys, "scenarios", "show", "toy-engine", *argv)
    assert code == 2 and message in err and err.startswith("mla-debug scenarios show: error:")


def test_set_on_a_seed_scenario_says_only_profiles_declare_settings(capsys, toy_data):
    code, _, err = run(capsys, "triage", "--model", "tiny", "--scenario", "vllm-pr51692", "--set", "USE_AITER=1")
    assert code == 2 and "scenario 'vllm-pr51692' declares no settings; engine profiles do (toy-engine)" in err


def test_triage_help_lists_the_profiles_and_the_set_option(capsys, toy_data):
    with pytest.raises(SystemExit):
        main(["triage", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "engine profiles of releases: toy-engine" in help_text
    assert "--set NAME=VALUE" in help_text and "`mla-debug scenarios` lists them" in help_text


def test_triage_under_a_profile_prints_its_resolution(capsys, toy_data):
    argv = ["triage", "--model", "tiny", "--tp", "1", "--modes", "decode", "--no-bisect", "--device", "cpu"]
    code, out, _ = run(capsys, *argv, "--scenario", "toy-engine", "--set", "USE_AITER=1")
    assert code == 0
    assert "engine profile vLLM 0.33.0 on mi355x: 3 rules applied; settings USE_AITER=1 (not the default 0)" in out
    assert (
        "rule rocm-list: aiter's plain GEMM first when aiter is on [vllm 0.33.0 vllm/envs.py: VLLM_ROCM_USE_AITER]"
        in out
    )
