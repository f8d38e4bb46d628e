"""Engine profile files are validated when they are read: unknown keys, bad conditions, settings that are
not declared or not allowed, and - in a profile - sources missing from a setting or rule, each raise a
ValueError that names the file (or scenario), the rule or setting, and the rule broken."""

from __future__ import annotations

import pytest
from toy_profile import SOURCE, profile

import mla_debug as md


def load(data: dict) -> md.Scenario:
    return md.Scenario.from_dict(data)


def rule(**changes) -> dict:
    base = {"id": "r", "says": "a rule", "then": {"priority": ["torch-reference"]}, "source": SOURCE}
    base.update(changes)
    return base


def with_rule(**changes) -> dict:
    return profile(rules=[rule(**changes)])


def test_the_toy_profile_is_valid():
    scen = load(profile())
    assert scen.engine == md.scenarios.Engine("vLLM", "0.33.0")
    assert [r.id for r in scen.rules] == ["rocm-list", "rocm-preshuffle", "fused-producer", "nvidia"]
    assert list(scen.settings) == ["USE_AITER", "USE_PRESHUFFLE", "--level", "hip"]
    assert scen.chosen == {}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (profile(extra=1), "scenario 'toy-engine': unknown key(s) extra; valid: name, description"),
        (with_rule(if_=1), "scenario 'toy-engine': rule r: unknown key(s) if_; valid: id, says, when, then, source"),
        (
            with_rule(when={"gpu": "mi355x"}),
            "scenario 'toy-engine': rule r: unknown when key(s) gpu; valid: vendor, arch, platform, settings",
        ),
        (
            with_rule(then={"tuned": "x.csv"}),
            "scenario 'toy-engine': rule r: unknown then key(s) tuned; valid: priority, disabled, overrides, "
            "kernel_options, behaviour",
        ),
        (with_rule(when={"vendor": "intel"}), "rule r: when.vendor 'intel' is not one of amd, nvidia, cpu"),
        (with_rule(when={"arch": ["gfx950", "mi355"]}), "rule r: when.arch 'mi355' is not an architecture name"),
        (with_rule(when={"platform": "mi999x"}), "rule r: when.platform 'mi999x' is not a platform; valid: cpu,"),
        (with_rule(when={"vendor": []}), "rule r: 'when.vendor' must be a name or a non-empty list of names, got []"),
        (
            with_rule(when={"settings": {"NOPE": "1"}}),
            "rule r: when.settings: NOPE is not a declared setting; declared: USE_AITER, USE_PRESHUFFLE, --level, hip",
        ),
        (
            with_rule(when={"settings": {"USE_AITER": ["1", "2"]}}),
            "rule r: setting USE_AITER = '2' is not allowed; allowed values: 0, 1",
        ),
        (with_rule(then={}), "rule r: 'then' must be a non-empty mapping with keys among priority, disabled"),
        (with_rule(then={"priority": None}), "rule r: 'then.priority' must be a non-empty list of kernel names"),
        (with_rule(then={"priority": ["nope"]}), "rule r: then.priority: unknown kernel 'nope'; registered kernels:"),
        (
            with_rule(then={"kernel_options": {"aiter-bpreshuffle": {"honour_layer_flags": "no"}}}),
            "rule r: 'then.kernel_options.aiter-bpreshuffle.honour_layer_flags' must be a bool",
        ),
        (
            with_rule(then={"behaviour": {"v4_fused": True}}),
            "rule r: unknown behaviour field(s) v4_fused; valid: v4_fused_norm_quant",
        ),
        (profile(rules=[rule(), rule()]), "rule id 'r' appears twice; each rule has its own id"),
        (profile(rules=[{"says": "x", "then": {}}]), "a rule lacks 'id'; every rule has id, says, when, then, source"),
        (profile(rules=[{"id": "x", "then": {"priority": ["torch-reference"]}}]), "rule x: lacks says"),
        (profile(rules={"id": "x"}), "'rules' must be a list of rule mappings"),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 30 else None,
)
def test_bad_rules_name_the_rule_and_what_is_wrong(data, message):
    with pytest.raises(ValueError) as err:
        load(data)
    assert message in str(err.value)


def test_a_profile_cites_the_source_of_every_setting_and_rule():
    data = profile()
    del data["settings"]["hip"]["source"]
    del data["rules"][1]["source"]
    with pytest.raises(ValueError) as err:
        load(data)
    assert str(err.value) == (
        "scenario 'toy-engine': an engine profile cites the source of every setting and rule (source: {package, "
        "version, file, function}); without one: setting hip, rule rocm-preshuffle"
    )
    # Without an engine it is no profile: sources are optional (a user's own scenario with a switch).
    del data["engine"]
    assert load(data).engine is None


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({**SOURCE, "line": 3}, "unknown source key(s) line; valid: package, version, file, function, lines"),
        ({k: v for k, v in SOURCE.items() if k != "file"}, "source lacks file; a source names package, version"),
        ({**SOURCE, "function": ""}, "'source.function' must be a non-empty string, got ''"),
        ("vllm/envs.py", "'source' must be a mapping {package, version, file, function, lines}"),
        ({**SOURCE, "lines": "12-"}, "'source.lines' must be line numbers or ranges, e.g. '255' or '1151, 1213-1214'"),
        ({**SOURCE, "lines": "30-20"}, "source.lines '30-20' is not a range of line numbers from 1 up"),
        ({**SOURCE, "lines": True}, "'source.lines' must be line numbers or ranges"),
    ],
)
def test_a_source_has_exactly_its_fields(source, message):
    with pytest.raises(ValueError, match="rule r") as err:
        load(with_rule(source=source))
    assert message in str(err.value)


def test_a_source_cites_lines_as_numbers_or_ranges():
    rule = load(with_rule(source={**SOURCE, "lines": 255})).rules[0]
    assert rule.source.lines == "255" and rule.source.line_ranges() == ((255, 255),)
    rule = load(with_rule(source={**SOURCE, "lines": "1151, 1213-1214"})).rules[0]
    assert rule.source.line_ranges() == ((1151, 1151), (1213, 1214))
    assert str(rule.source).endswith(":1151,1213-1214: " + SOURCE["function"])
    assert rule.source.to_dict()["lines"] == "1151, 1213-1214"
    assert "lines" not in load(with_rule(source=SOURCE)).rules[0].source.to_dict()


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"kind": "env", "default": "0", "values": ["0"]}, "setting X: lacks says; a declaration has kind,"),
        ({"kind": "flag", "default": "0", "values": ["0"], "says": "s"}, "kind 'flag' is not one of env, arg, fact"),
        ({"kind": "env", "default": "2", "values": ["0", "1"], "says": "s"}, "X = '2' is not allowed; allowed values"),
        ({"kind": "env", "default": "0", "values": [], "says": "s"}, "'values' must be a non-empty list"),
        ({"kind": "env", "default": "0", "values": ["0"], "says": "s", "range": 1}, "unknown key(s) range"),
        ({"kind": "env", "default": None, "values": ["0"], "says": "s"}, "must be a scalar"),
    ],
)
def test_a_setting_declaration_is_checked(declaration, message):
    data = profile()
    data["settings"]["X"] = {**declaration, "source": SOURCE}
    with pytest.raises(ValueError, match="setting X") as err:
        load(data)
    assert message in str(err.value)


def test_setting_values_are_compared_as_text():
    data = profile()
    data["settings"]["USE_AITER"] = {**data["settings"]["USE_AITER"], "default": 0, "values": [0, 1]}
    data["settings"]["flag"] = {"kind": "env", "default": False, "values": [True, False], "says": "s", "source": SOURCE}
    scen = load(data)
    assert scen.settings["USE_AITER"].values == ("0", "1") and scen.settings["USE_AITER"].default == "0"
    assert scen.settings["flag"].values == ("true", "false")
    assert scen.with_settings({"USE_AITER": 1, "flag": True}).setting_values()["flag"] == "true"


def test_setting_a_setting_needs_its_declaration_and_an_allowed_value():
    scen = load(profile())
    with pytest.raises(ValueError) as err:
        scen.with_settings({"USE_AITR": "1"})
    assert str(err.value) == (
        "scenario 'toy-engine': settings: USE_AITR is not a declared setting; declared: USE_AITER, USE_PRESHUFFLE, "
        "--level, hip"
    )
    with pytest.raises(ValueError) as err:
        scen.with_settings({"USE_AITER": "yes"})
    assert str(err.value) == ("scenario 'toy-engine': setting USE_AITER = 'yes' is not allowed; allowed values: 0, 1")
    with pytest.raises(ValueError, match="setting USE_AITER takes one value, got"):
        scen.with_settings({"USE_AITER": ["1"]})
    with pytest.raises(ValueError, match=r"scenario 'vllm-pr51692' declares no settings; engine profiles do"):
        md.scenario("vllm-pr51692").with_settings({"USE_AITER": "1"})


def test_a_scalar_in_a_file_without_base_sets_nothing_undeclared():
    with pytest.raises(ValueError) as err:
        load({"name": "x", "settings": {"USE_AITER": "1"}})
    assert "settings: USE_AITER is not a declared setting; declared: (none: declare it as a mapping" in str(err.value)


def test_a_key_given_twice_in_a_file_is_refused(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(
        "name: twice\nbase: vllm-0.33\nsettings: {VLLM_ROCM_USE_AITER: '1'}\nsettings: {VLLM_USE_DEEP_GEMM: '0'}\n"
    )
    with pytest.raises(ValueError, match=r"twice.yaml is not valid YAML .*key 'settings' appears twice in one mapping"):
        md.Scenario.from_file(path)
