"""Engine profiles by name: every data/engines/*.yaml is a named scenario (md.scenario, --scenario, a file's
base), found through the one function that locates the data folder (the checkout's data/, or
MLA_DEBUG_DATA); a scenario built on a profile sets its settings and replaces or adds rules by id."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from toy_profile import SOURCE, profile

import mla_debug as md
from mla_debug.scenarios import data_folder, engine_profile_files, profile_names
from mla_debug.scenarios.shipped_data import ENV_VAR

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def data(tmp_path, monkeypatch) -> Path:
    """A data folder of one's own holding the toy profile, named by MLA_DEBUG_DATA."""
    engines = tmp_path / "engines"
    engines.mkdir()
    (engines / "toy-engine.yaml").write_text(yaml.safe_dump(profile(), sort_keys=False))
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    return tmp_path


def test_the_checkout_data_folder_is_found_without_the_variable(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert data_folder() == REPO / "data"
    assert {"vllm-0.33", "sglang-0.5.23"} <= set(profile_names())
    assert engine_profile_files()["vllm-0.33"] == REPO / "data" / "engines" / "vllm-0.33.yaml"


def test_the_variable_names_another_data_folder(data):
    assert data_folder() == data
    assert profile_names() == ["toy-engine"]
    assert md.scenario("toy-engine").engine.name == "vLLM"


def test_a_variable_that_names_no_folder_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=rf"{ENV_VAR}=.*nowhere is not a folder; it names the data folder"):
        data_folder()
    assert profile_names() == []  # listing never fails: a help text still prints
    with pytest.raises(ValueError) as err:
        md.scenario("vllm-0.33")
    assert "unknown scenario 'vllm-0.33'; valid: reference, vllm-baseline" in str(err.value)
    assert "no engine profiles: MLA_DEBUG_DATA=" in str(err.value)


def test_an_unknown_name_lists_the_built_ins_and_the_profiles(data):
    with pytest.raises(ValueError) as err:
        md.scenario("nope")
    assert str(err.value) == (
        "unknown scenario 'nope'; valid: reference, vllm-baseline, vllm-pr51692, vllm-pr56433, nvidia-cublas "
        "(built-in), toy-engine (engine profiles in data/engines/) (or a .yml/.yaml/.json scenario file)"
    )


def test_a_profile_names_itself_after_its_file(data):
    (data / "engines" / "other.yaml").write_text(yaml.safe_dump(profile(), sort_keys=False))
    with pytest.raises(ValueError, match=r"engine profile .*other.yaml names itself 'toy-engine'; a profile's name"):
        md.scenario("other")


def test_two_files_of_one_name_are_refused(data):
    (data / "engines" / "toy-engine.yml").write_text("name: toy-engine\n")
    assert profile_names() == []  # a help text still prints
    with pytest.raises(ValueError, match="toy-engine.yaml and toy-engine.yml both name the profile 'toy-engine'"):
        md.scenario("toy-engine")


def test_a_base_chain_that_loops_is_refused(data):
    (data / "engines" / "a.yaml").write_text(yaml.safe_dump({"name": "a", "base": "b"}))
    (data / "engines" / "b.yaml").write_text(yaml.safe_dump({"name": "b", "base": "a"}))
    with pytest.raises(ValueError, match=r"its base chain comes back to itself \(a -> b -> a\)"):
        md.scenario("a")


def test_a_scenario_built_on_a_profile_sets_settings_and_edits_rules_by_id(data):
    fork = md.scenario(
        {
            "name": "my-fork",
            "base": "toy-engine",
            "settings": {"USE_AITER": 1},
            "rules": [
                {  # the fork honours the flags: the same id replaces the rule in place
                    "id": "rocm-preshuffle",
                    "says": "the fork honours skip_weight_relayout",
                    "when": {"vendor": "amd", "arch": "gfx950", "settings": {"USE_AITER": "1"}},
                    "then": {
                        "priority": ["aiter-bpreshuffle", "aiter-blockscale", "torch-reference"],
                        "kernel_options": {"aiter-bpreshuffle": {"honour_layer_flags": True}},
                    },
                    "source": {**SOURCE, "package": "my-vllm"},
                },
                {
                    "id": "extra",
                    "says": "one more",
                    "then": {"overrides": {"o_proj": "torch-reference"}},
                    "source": SOURCE,
                },
            ],
        }
    )
    assert fork.engine == md.scenario("toy-engine").engine  # inherited, so sources stay required
    assert [r.id for r in fork.rules] == ["rocm-list", "rocm-preshuffle", "fused-producer", "nvidia", "extra"]
    resolved = fork.resolve("mi355x")
    assert resolved.kernel_options == {"aiter-bpreshuffle": {"honour_layer_flags": True}}
    assert resolved.overrides == {"o_proj": "torch-reference"}
    assert resolved.resolution.rules[1].says == "the fork honours skip_weight_relayout"
    with pytest.raises(ValueError, match="without one: rule unsourced"):
        md.scenario(
            {
                "name": "f",
                "base": "toy-engine",
                "rules": [{"id": "unsourced", "says": "x", "then": {"priority": ["torch-reference"]}}],
            }
        )
    with pytest.raises(ValueError, match=r"scenario 'f': base: unknown scenario 'toy'; valid: reference"):
        md.scenario({"name": "f", "base": "toy"})


def test_fixed_by_names_a_profile_too(data):
    scen = md.scenario({"name": "x", "base": "vllm-pr51692", "fixed_by": "toy-engine"})
    assert scen.fixed_by == "toy-engine"


def test_the_shipped_data_folder_has_its_readmes():
    assert (REPO / "data" / "README.md").is_file()
    assert (REPO / "data" / "engines" / "README.md").is_file()
