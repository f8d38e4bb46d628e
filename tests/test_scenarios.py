"""Scenarios as data: to_dict/from_dict round trips, base inheritance, YAML/JSON files, eager validation."""

from __future__ import annotations

import json
import pickle
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch
import yaml

import mla_debug as md
from mla_debug.normquant import NORM_QUANT_BACKENDS
from mla_debug.scenarios import ModelBehaviour
from mla_debug.scenarios.behaviour import CHOICES

BUILTIN = ["reference", "vllm-baseline", "vllm-pr51692", "vllm-pr56433", "nvidia-cublas"]
SOURCE = md.scenarios.Source("vllm", "0.33.0", "vllm/envs.py", "VLLM_ROCM_USE_AITER")
EMBEDDED = md.kernels.TunedTable.embedded()
REGISTRY = f"registered kernels: {', '.join(md.kernels.kernel_names())}"
BEHAVIOUR_FIELDS = (
    "v4_fused_norm_quant, v4_fused_transpose_scale, v4_ask_consumers, v4_model_preshuffle, "
    "skip_model_shuffle_if_kernel_preshuffles, v4_wqa_wkv_override, norm_quant_backend, v4_wo_a_is_bmm, "
    "v3_fused_norm_quant, "
    "v3_fused_transpose_scale, absorbed_weight_dtype, absorbed_bmm, absorbed_weights_via, absorbed_weights_derived, "
    "load_order, honours_rope_interleave, fused_scale_strided"
)
VALID_KEYS = (
    "name, description, base, priority, preshuffled_first, disabled, overrides, kernel_options, behaviour, tuned, "
    "triton_configs, upstream, fixed_by, engine, settings, rules, reachable"
)
NAMED = f"{', '.join(BUILTIN)} (built-in), {', '.join(md.scenarios.profile_names())} (engine profiles in data/engines/)"

IGNORE_FLAGS_YAML = """\
# vLLM PR #51692's kernel choice, written by hand: the preshuffled GEMM first, layer flags ignored.
name: ignore-flags
description: preshuffled aiter GEMM first, skip_weight_relayout ignored
kernel_options:
  AiterPreshuffledFp8BlockScaledMMKernel:   # vLLM's class name for aiter-bpreshuffle
    honour_layer_flags: false
"""


def policy_fields(policy: md.KernelPolicy) -> tuple:
    return (policy.priority, policy.disabled, policy.overrides, policy.kernel_options)


def write_triton_config(folder: Path) -> Path:
    """A folder with one aiter Triton config: gfx1250's preshuffle GEMM tuned for (N=4096, K=512)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gfx1250-GEMM-A8W8_BLOCKSCALE_PRESHUFFLED-N=4096-K=512.json").write_text('{"M_LEQ_4": {}}')
    return folder


def write_tuned_csv(path: Path) -> Path:
    """A one-row aiter tuned table: (gfx950, 256 CUs) has only N=3072, K=1536."""
    path.write_text("gfx,cu_num,M,N,K,libtype,kernelName,us\ngfx950,256,16,3072,1536,ck,my_kernel,1.5\n")
    return path


# -- built-ins -------------------------------------------------------------------------------------


def test_scenario_names_are_the_builtins_and_unknown_names_list_them():
    assert md.scenarios.scenario_names() == BUILTIN
    assert "scenario_names" in md.scenarios.__all__
    with pytest.raises(ValueError) as err:
        md.scenario("nope")
    assert str(err.value) == f"unknown scenario 'nope'; valid: {NAMED} (or a .yml/.yaml/.json scenario file)"


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_round_trips_through_plain_data(name):
    original = md.scenario(name)
    data = original.to_dict()
    # Plain data: it survives JSON and YAML text unchanged.
    assert json.loads(json.dumps(data)) == data
    assert yaml.safe_load(yaml.safe_dump(data)) == data
    again = md.Scenario.from_dict(data)
    assert again == original
    assert again.to_dict() == data
    mine, theirs = again.policy("mi355x", tuned=EMBEDDED), original.policy("mi355x", tuned=EMBEDDED)
    assert policy_fields(mine) == policy_fields(theirs)


def test_a_scenario_with_every_field_set_round_trips_through_a_yaml_file(tmp_path):
    csv_path = write_tuned_csv(tmp_path / "tuned.csv")
    full = md.Scenario(
        name="everything",
        description="every field away from its default",
        preshuffled_first=False,
        disabled=("cublas-blockwise", "aiter-bpreshuffle"),
        overrides={"kv_b_proj": "torch-reference", "o_proj": "aiter-blockscale"},
        kernel_options={"aiter-blockscale": {"accumulation": "dequant", "flavor": "vllm"}},
        behaviour=ModelBehaviour(
            **{f.name: not f.default for f in fields(ModelBehaviour) if isinstance(f.default, bool)},
            # The last value of each choice is not its default, and together they are consistent.
            **{name: values[-1] for name, values in CHOICES.items()},
            norm_quant_backend="torch",
        ),
        tuned_path=str(csv_path),
        triton_configs_path=str(write_triton_config(tmp_path / "triton")),
        upstream="vLLM PR #51692 plus a local patch",
        fixed_by="vllm-pr56433",
        engine=md.scenarios.Engine("vLLM", "0.33.0+local"),
        reachable=md.scenarios.Reachability(
            md.scenarios.Reach.LATENT,
            True,
            "once X is tuned",
            (md.scenarios.Evidence("it reads X", md.scenarios.Source("vllm", "0.33.0", "vllm/envs.py", "X", "1-2")),),
        ),
        settings={"USE_X": md.scenarios.Setting("USE_X", md.scenarios.SettingKind.ENV, "0", ("0", "1"), "x", SOURCE)},
        chosen={"USE_X": "1"},
        rules=(
            md.scenarios.Rule(
                "x-on",
                "X on",
                md.scenarios.When(vendor=("amd",), settings=(("USE_X", ("1",)),)),
                {"priority": ["aiter-blockscale", "torch-reference"]},
                SOURCE,
            ),
        ),
    )
    # Precondition: every field but priority (checked below; it excludes preshuffled_first) and the three a
    # resolution sets (never written to a file) is non-default, and so is every behaviour field.
    default = md.Scenario("d", "")
    assert [f for f in md.Scenario.__dataclass_fields__ if getattr(full, f) == getattr(default, f)] == [
        "priority",
        "resolution",
        "origin",
        "resolved_on",
    ]
    assert [f.name for f in fields(ModelBehaviour) if getattr(full.behaviour, f.name) == f.default] == []
    path = tmp_path / "everything.yaml"
    path.write_text(yaml.safe_dump(full.to_dict()))
    assert md.Scenario.from_file(path) == full
    with_priority = replace(full, priority=("aiter-blockscale", "torch-reference"), preshuffled_first=True)
    assert md.Scenario.from_dict(with_priority.to_dict()) == with_priority


def test_to_dict_writes_every_behaviour_field_and_the_relevant_priority_key():
    ref = md.scenario("reference").to_dict()
    assert ref["priority"] == ["torch-reference"] and "preshuffled_first" not in ref
    baseline = md.scenario("vllm-baseline").to_dict()
    assert baseline["preshuffled_first"] is False and "priority" not in baseline
    assert ", ".join(baseline["behaviour"]) == BEHAVIOUR_FIELDS
    assert md.scenario("vllm-pr51692").to_dict()["kernel_options"] == {
        "aiter-bpreshuffle": {"honour_layer_flags": False}
    }


# -- from_dict -------------------------------------------------------------------------------------


def test_base_inheritance_replaces_lists_and_merges_mappings():
    base = md.scenario("vllm-pr56433")
    base_before = base.to_dict()
    mine = md.Scenario.from_dict(
        {
            "name": "pr56433-dequant",
            "base": "vllm-pr56433",
            "disabled": "AiterFp8BlockScaledMMKernel",
            "overrides": {"kv_b_proj": "torch-reference"},
            "kernel_options": {"aiter-bpreshuffle": {"accumulation": "dequant"}},
            "behaviour": {"v4_ask_consumers": False},
        }
    )
    assert mine == md.Scenario(
        name="pr56433-dequant",
        description=base.description,  # inherited
        priority=None,
        preshuffled_first=True,
        disabled=("aiter-blockscale",),  # canonical name of the vLLM class
        overrides={"kv_b_proj": "torch-reference"},
        kernel_options={"aiter-bpreshuffle": {"honour_layer_flags": True, "accumulation": "dequant"}},
        behaviour=replace(base.behaviour, v4_ask_consumers=False),
        upstream=base.upstream,  # inherited like every scalar
    )
    assert base.to_dict() == base_before  # the built-in was not mutated by the merge
    kernel = mine.policy("mi355x", tuned=EMBEDDED).kernel("aiter-bpreshuffle")
    assert (kernel.accumulation, kernel.honour_layer_flags) == ("dequant", True)


def test_without_base_the_fields_take_the_dataclass_defaults_and_names_are_canonical():
    mine = md.Scenario.from_dict(
        {
            "priority": ["AiterFp8BlockScaledMMKernel", "torch-reference"],
            "disabled": "aiter-bpreshuffle, AiterPreshuffledFp8BlockScaledMMKernel",
        },
        name="from-argument",
    )
    assert mine == md.Scenario(
        name="from-argument",
        description="",
        priority=("aiter-blockscale", "torch-reference"),
        disabled=("aiter-bpreshuffle",),  # both spellings name one kernel
    )
    # The key wins over the argument; `priority: null` on a base with a priority restores the default.
    other = md.Scenario.from_dict({"name": "key", "base": "reference", "priority": None}, name="argument")
    assert (other.name, other.priority) == ("key", None)
    assert other.policy("mi355x", tuned=EMBEDDED).priority == [
        "aiter-bpreshuffle",
        "aiter-blockscale",
        "torch-reference",
    ]


def test_scenario_accepts_a_dict_and_a_scenario():
    s = md.scenario({"name": "d", "base": "vllm-pr51692"})
    assert s == replace(md.scenario("vllm-pr51692"), name="d")
    # The copy owns its mappings: changing it leaves the built-in alone.
    s.kernel_options["aiter-bpreshuffle"]["honour_layer_flags"] = True
    s.overrides["o_proj"] = "torch-reference"
    assert md.scenario("vllm-pr51692").kernel_options == {"aiter-bpreshuffle": {"honour_layer_flags": False}}
    assert md.scenario("vllm-pr51692").overrides == {}
    assert md.scenario(s) is s


@pytest.mark.parametrize(
    "data, message",
    [
        ({"name": "x", "prority": ["torch-reference"]}, f"scenario 'x': unknown key(s) prority; valid: {VALID_KEYS}"),
        (
            {"name": "x", "behaviour": {"v4_fused": True}},
            f"scenario 'x': unknown behaviour field(s) v4_fused; valid: {BEHAVIOUR_FIELDS}",
        ),
        (
            {"name": "x", "kernel_options": {"aiter-bpreshuffle": {"honour_flags": False}}},
            "scenario 'x': unknown option(s) of kernel 'aiter-bpreshuffle' in kernel_options: honour_flags; "
            "valid: accumulation, flavor, honour_layer_flags, selection, scale_read",
        ),
        (
            {"name": "x", "kernel_options": {"torch-reference": {"accumulation": "dequant"}}},
            "scenario 'x': unknown option(s) of kernel 'torch-reference' in kernel_options: accumulation; valid: flavor",
        ),
        ({}, "scenario: a scenario needs a name: give the key 'name' (or pass name=...)"),
        (
            {"name": "x", "base": "vllm-pr99999"},
            f"scenario 'x': base: unknown scenario 'vllm-pr99999'; valid: {NAMED} (or a .yml/.yaml/.json scenario file)",
        ),
        (["name", "x"], f"scenario: a scenario must be a mapping of keys {VALID_KEYS}, got list"),
    ],
)
def test_unknown_keys_are_named_with_the_valid_ones(data, message):
    with pytest.raises(ValueError) as err:
        md.Scenario.from_dict(data)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("preshuffled_first", "yes", "'preshuffled_first' must be a bool (true or false), got 'yes' (str)"),
        (
            "priority",
            "aiter-blockscale",
            "'priority' must be a non-empty list of kernel names (or null for the platform's default order), "
            "got 'aiter-blockscale' (str)",
        ),
        ("priority", [], "'priority' must be a non-empty list of kernel names"),
        ("disabled", 3, "'disabled' must be a list of kernel names or one comma-separated string, got 3 (int)"),
        (
            "overrides",
            ["kv_b_proj"],
            "'overrides' must be a mapping {layer name: kernel name}, got ['kv_b_proj'] (list)",
        ),
        (
            "behaviour",
            {"v4_ask_consumers": "true"},
            "'behaviour.v4_ask_consumers' must be a bool (true or false), got 'true' (str)",
        ),
        (
            "behaviour",
            {"norm_quant_backend": 1},
            "'behaviour.norm_quant_backend' must be a norm+quant backend name (string), got 1 (int)",
        ),
        (
            "behaviour",
            {"load_order": "remote"},
            "'behaviour.load_order' must be one of 'standard', 'remote-kv', got 'remote' (str)",
        ),
        (
            "behaviour",
            {"absorbed_weight_dtype": True},
            "'behaviour.absorbed_weight_dtype' must be one of 'fp32', 'bf16', 'fp8-per-tensor', 'fp8-per-tensor-from-bf16', got True (bool)",
        ),
        (
            "behaviour",
            {"v4_wo_a_is_bmm": "no"},
            "'behaviour.v4_wo_a_is_bmm' must be a bool (true or false), got 'no' (str)",
        ),
        (
            "behaviour",
            {"absorbed_bmm": "fp8"},
            "'behaviour.absorbed_bmm' must be one of 'dequantized', 'fp8-group-quant', 'fp8-group-quant-uk', got 'fp8' (str)",
        ),
        (
            "kernel_options",
            {"aiter-bpreshuffle": {"honour_layer_flags": "false"}},
            "'kernel_options.aiter-bpreshuffle.honour_layer_flags' must be a bool (like its default True), "
            "got 'false' (str)",
        ),
        (
            "kernel_options",
            {"aiter-bpreshuffle": True},
            "'kernel_options.aiter-bpreshuffle' must be a mapping {option: value}, got True (bool)",
        ),
        ("description", 1, "'description' must be a string, got 1 (int)"),
        (
            "tuned",
            5,
            "'tuned' must be a path or a list of paths (aiter tuned CSV files or a configs/ folder), got 5 (int)",
        ),
    ],
)
def test_wrong_types_name_the_key_the_value_and_the_expected_type(key, value, message):
    with pytest.raises(ValueError) as err:
        md.Scenario.from_dict({"name": "x", key: value})
    assert str(err.value).startswith(f"scenario 'x': {message}")


def test_behaviour_fields_are_independent_and_checked_in_python_too():
    """A file (or a profile's rule) may set any one field alone, in any order - the FP8 BMM without the
    FP8 weights it multiplies included; a ModelBehaviour built in Python is checked like a file."""
    alone = md.Scenario.from_dict({"name": "b", "behaviour": {"absorbed_bmm": "fp8-group-quant"}})
    assert (alone.behaviour.absorbed_weight_dtype, alone.behaviour.absorbed_bmm) == ("fp32", "fp8-group-quant")
    with pytest.raises(ValueError, match="load_order='sideways' is not one of 'standard', 'remote-kv'"):
        ModelBehaviour(load_order="sideways")
    with pytest.raises(ValueError, match="v3_fused_norm_quant='yes' must be a bool"):
        ModelBehaviour(v3_fused_norm_quant="yes")


def test_a_non_string_name_is_a_type_error_in_words():
    with pytest.raises(ValueError) as err:
        md.Scenario.from_dict({"name": 7})
    assert str(err.value) == "scenario: 'name' must be a non-empty string, got 7 (int)"


@pytest.mark.parametrize(
    "data, where",
    [
        ({"priority": ["aiter-fast"]}, "priority"),
        ({"disabled": "aiter-blockscale, aiter-fast"}, "disabled"),
        ({"overrides": {"q_b_proj": "aiter-fast"}}, "overrides.q_b_proj"),
        ({"kernel_options": {"aiter-fast": {}}}, "kernel_options"),
    ],
)
def test_unknown_kernel_names_give_the_registrys_error(data, where):
    with pytest.raises(ValueError) as err:
        md.Scenario.from_dict({"name": "x", **data})
    assert str(err.value) == f"scenario 'x': {where}: unknown kernel 'aiter-fast'; {REGISTRY}"


def test_unknown_norm_quant_backends_give_the_registrys_error_like_kernels():
    with pytest.raises(ValueError) as err:
        md.Scenario.from_dict({"name": "x", "behaviour": {"norm_quant_backend": "cuda"}})
    backends = ", ".join(NORM_QUANT_BACKENDS.names())
    assert str(err.value) == (
        f"scenario 'x': behaviour.norm_quant_backend: unknown norm+quant backend 'cuda'; "
        f"registered norm+quant backends: {backends} (or 'auto')"
    )
    assert {"torch", "triton", "aiter"} <= set(NORM_QUANT_BACKENDS.names())


@pytest.mark.parametrize("backend", ["auto", "torch", "triton", "aiter"])
def test_every_registered_norm_quant_backend_and_auto_are_accepted(backend):
    scenario = md.Scenario.from_dict({"name": "x", "behaviour": {"norm_quant_backend": backend}})
    assert scenario.behaviour.norm_quant_backend == backend


def test_a_backend_registered_later_is_a_valid_scenario_name_until_unregistered():
    from mla_debug.normquant import register_backend, unregister_backend
    from mla_debug.normquant.reference import _torch_backend

    data = {"name": "x", "behaviour": {"norm_quant_backend": "my-backend"}}
    register_backend("my-backend", _torch_backend)
    try:
        assert md.Scenario.from_dict(data).behaviour.norm_quant_backend == "my-backend"
    finally:
        unregister_backend("my-backend")
    with pytest.raises(ValueError, match="unknown norm\\+quant backend 'my-backend'"):
        md.Scenario.from_dict(data)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"accumulation": "fast"}, "accumulation 'fast' is not one of"),
        ({"flavor": "nvidia"}, "flavor: unknown quantization flavor 'nvidia'; valid:"),
    ],
)
def test_bad_kernel_option_values_fail_at_load(options, message):
    with pytest.raises(ValueError, match="scenario 'x': kernel_options.aiter-blockscale") as err:
        md.Scenario.from_dict({"name": "x", "kernel_options": {"aiter-blockscale": options}})
    assert message in str(err.value)


def test_preshuffled_first_with_an_explicit_priority_is_refused():
    with pytest.raises(ValueError, match="'preshuffled_first' only shapes the platform's default order, but the key"):
        md.Scenario.from_dict({"name": "x", "priority": ["aiter-blockscale"], "preshuffled_first": False})
    with pytest.raises(ValueError, match="but base 'reference' gives an explicit priority \\['torch-reference'\\]"):
        md.Scenario.from_dict({"name": "x", "base": "reference", "preshuffled_first": False})


def test_a_missing_tuned_table_fails_at_load(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"scenario 'x': tuned: .*{tmp_path / 'none.csv'} does not exist"):
        md.Scenario.from_dict({"name": "x", "tuned": str(tmp_path / "none.csv")})


# -- files -----------------------------------------------------------------------------------------


def test_yaml_scenario_ignoring_flags_chooses_like_vllm_pr51692(tmp_path):
    path = tmp_path / "ignore-flags.yaml"
    path.write_text(IGNORE_FLAGS_YAML)
    mine = md.Scenario.from_file(path)
    assert mine.kernel_options == {"aiter-bpreshuffle": {"honour_layer_flags": False}}
    choices = {}
    for name, scen in (
        ("yaml", mine),
        ("pr51692", md.scenario("vllm-pr51692")),
        ("pr56433", md.scenario("vllm-pr56433")),
    ):
        kernel, reason = scen.policy("mi355x", tuned=EMBEDDED).select("q_b_proj", 3072, 1536, "mi355x")
        choices[name] = (kernel.name, kernel.honour_layer_flags, reason)
    assert choices["yaml"] == choices["pr51692"]
    assert choices["yaml"][:2] == ("aiter-bpreshuffle", False)
    assert choices["pr56433"][:2] == ("aiter-bpreshuffle", True)  # same kernel, flags honoured: not the same
    # ... and the load step agrees: a weight flagged skip_weight_relayout is shuffled under both.
    plat = md.platform("mi355x")
    w = md.layouts.quantize_blocks(
        torch.randn(3072, 1536, generator=torch.Generator().manual_seed(0)) * 0.02, fmt=plat.fp8
    )
    counts = {}
    for name, scen in (
        ("yaml", mine),
        ("pr51692", md.scenario("vllm-pr51692")),
        ("pr56433", md.scenario("vllm-pr56433")),
    ):
        linear = md.kernels.BlockScaledLinear("q_b_proj", w, skip_weight_relayout=True)
        counts[name] = linear.load(scen.policy(plat, tuned=EMBEDDED), plat).weight.layout.shuffle_count
    assert counts == {"yaml": 1, "pr51692": 1, "pr56433": 0}


def test_json_file_and_md_scenario_by_path(tmp_path):
    path = tmp_path / "no-preshuffle.json"
    path.write_text(json.dumps({"base": "vllm-pr51692", "disabled": ["aiter-bpreshuffle"]}))
    by_file = md.Scenario.from_file(path)
    assert by_file.name == "no-preshuffle"  # the file's stem
    assert by_file.disabled == ("aiter-bpreshuffle",)
    assert md.scenario(str(path)) == by_file
    assert md.scenario(path) == by_file
    kernel, reason = by_file.policy("mi355x", tuned=EMBEDDED).select("q_b_proj", 3072, 1536, "mi355x")
    assert kernel.name == "aiter-blockscale" and reason.endswith("skipped aiter-bpreshuffle disabled")
    # A scenario crosses process boundaries (the distributed executor pickles it).
    assert pickle.loads(pickle.dumps(by_file)) == by_file


def test_relative_tuned_paths_are_relative_to_the_file(tmp_path):
    folder = tmp_path / "scenarios"
    folder.mkdir()
    csv_path = write_tuned_csv(folder / "tuned.csv")
    path = folder / "mine.yml"
    path.write_text("name: one-row-table\ntuned: tuned.csv\n")
    mine = md.scenario(str(path))
    assert mine.tuned_path == str(csv_path)
    assert md.Scenario.from_dict(mine.to_dict()) == mine
    policy = mine.policy("mi355x")
    assert policy.tuned.source == str(csv_path)
    assert policy.select("q_b_proj", 3072, 1536, "mi355x")[0].name == "aiter-bpreshuffle"
    assert policy.select("q_b_proj", 2112, 7168, "mi355x")[0].name == "aiter-blockscale"  # in the embedded table
    both = md.Scenario.from_dict({"name": "two", "tuned": [str(csv_path), str(csv_path)]})
    assert both.tuned_path == (str(csv_path), str(csv_path))
    assert both.to_dict()["tuned"] == [str(csv_path), str(csv_path)]


@pytest.mark.parametrize(
    "file_name, text, error, message",
    [
        ("bad.yaml", "name: [unclosed\n", ValueError, "is not valid YAML"),
        ("bad.json", "{'name': 1}", ValueError, "is not valid JSON"),
        ("empty.yml", "# nothing\n", ValueError, "is empty; it must hold a mapping"),
        ("list.yaml", "- name: x\n", ValueError, "a scenario must be a mapping of keys"),
        ("typo.yaml", "name: x\nbehavior: {}\n", ValueError, "unknown key(s) behavior; valid:"),
        ("opts.yaml", "kernel_options: {aiter-bpreshuffle: {honour: true}}\n", ValueError, "unknown option(s)"),
    ],
)
def test_bad_files_fail_at_load_naming_the_file(tmp_path, file_name, text, error, message):
    path = tmp_path / file_name
    path.write_text(text)
    with pytest.raises(error) as err:
        md.scenario(str(path))
    assert str(err.value).startswith(f"scenario file {path}")
    assert message in str(err.value)


def test_missing_files_and_other_types(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(FileNotFoundError) as err:
        md.scenario(str(missing))
    assert str(err.value) == f"scenario file {missing} does not exist"
    with pytest.raises(ValueError, match="the name must end in .yml, .yaml or .json"):
        md.Scenario.from_file(tmp_path / "scenario.txt")
    with pytest.raises(TypeError, match="scenario: expected a name, a Scenario, a dict or a path"):
        md.scenario(123)


def test_fixed_by_names_a_named_scenario():
    assert md.scenario("vllm-pr51692").fixed_by == "vllm-pr56433"
    assert md.scenario("vllm-pr51692").to_dict()["fixed_by"] == "vllm-pr56433"
    assert "fixed_by" not in md.scenario("vllm-pr56433").to_dict()  # written only when set
    with pytest.raises(ValueError) as err:
        md.Scenario.from_dict({"name": "x", "fixed_by": "my-fix"})
    assert str(err.value) == (
        f"scenario 'x': fixed_by: unknown scenario 'my-fix'; valid: {NAMED} (or a .yml/.yaml/.json scenario file)"
    )
    with pytest.raises(ValueError, match="'upstream' must be a string"):
        md.Scenario.from_dict({"name": "x", "upstream": 56433})


def test_model_behaviour_fields_match_the_documented_list():
    # The error messages above list these; a new field must show up in them (and in to_dict).
    assert ", ".join(f for f in ModelBehaviour.__dataclass_fields__) == BEHAVIOUR_FIELDS


def test_triton_configs_are_read_relative_to_the_file_and_reach_the_policy(tmp_path):
    folder = write_triton_config(tmp_path / "configs" / "triton")
    path = tmp_path / "configs" / "mine.yaml"
    path.write_text("base: vllm-baseline\ntriton_configs: triton\n")
    mine = md.Scenario.from_file(path)
    assert mine.triton_configs_path == str(folder)
    table = mine.policy("gfx1250", tuned=EMBEDDED).triton_configs
    assert table.tuned("gfx1250", "GEMM-A8W8_BLOCKSCALE_PRESHUFFLED", 4096, 512)
    assert md.scenario("vllm-baseline").policy("gfx1250", tuned=EMBEDDED).triton_configs.source == (
        md.kernels.TritonConfigTable.default().source
    )
    with pytest.raises(FileNotFoundError, match="triton_configs: aiter Triton configs: .*nowhere does not exist"):
        md.Scenario.from_dict({"name": "x", "triton_configs": str(tmp_path / "nowhere")})
