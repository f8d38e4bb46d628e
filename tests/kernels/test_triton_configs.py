"""aiter's arch-keyed Triton GEMM configs: reading aiter's files, the probes vLLM 0.33 makes (M=128 for
the block-scale GEMM, M=1 for the preshuffled one), the embedded facts of the pinned release against the
installed package, and clear errors for files that cannot be used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mla_debug as md
from mla_debug import real_aiter
from mla_debug.kernels.triton_configs import (
    BLOCKSCALE,
    BLOCKSCALE_PRESHUFFLED,
    PROBE_M,
    TritonConfigTable,
)


def write(folder: Path, name: str, content) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_the_default_is_the_pinned_release_everywhere():
    table = TritonConfigTable.default()
    assert "0.1.7.post2.dev18" in table.source and len(table) == 11
    assert table.tuned("mi355x", BLOCKSCALE, 2112, 7168)  # fused_qkv_a_proj of DeepSeek-V3
    assert not table.tuned("mi355x", BLOCKSCALE, 24576, 1536)
    assert not table.tuned("mi300x", BLOCKSCALE, 2112, 7168)  # MI300X has only the default file
    # No preshuffled block-scale config and nothing for gfx1250 in that release.
    assert not table.shapes(config=BLOCKSCALE_PRESHUFFLED) and not table.shapes(arch="gfx1250")


def test_embedded_facts_are_the_installed_pinned_release():
    if real_aiter.unavailable_reason() is not None:
        pytest.skip(real_aiter.unavailable_reason())
    installed = TritonConfigTable.from_installed_aiter()
    embedded = TritonConfigTable.pinned_release()
    for config in (BLOCKSCALE, BLOCKSCALE_PRESHUFFLED):
        assert installed.shapes(config=config) == embedded.shapes(config=config)
        for arch, name, n, k in installed.shapes(config=config):
            assert installed.config(arch, name, n, k).keys == embedded.config(arch, name, n, k).keys
    assert not installed.shapes(arch="gfx1250") and not installed.ignored


def test_device_and_gfx_prefixes_map_to_arches(tmp_path):
    write(tmp_path, "MI300X-GEMM-A8W8_BLOCKSCALE-N=512-K=7168.json", {"any": {}})
    write(tmp_path, "gfx1250-GEMM-A8W8_BLOCKSCALE_PRESHUFFLED-N=4096-K=512.json", {"M_LEQ_4": {}})
    write(tmp_path, "gfx950-GEMM-A8W8_BLOCKSCALE.json", {"any": {}})  # a per-arch default: not tuning
    write(tmp_path, "notes.txt", "not a config")
    table = TritonConfigTable.from_folder(tmp_path)
    assert table.shapes() == {
        ("gfx942", BLOCKSCALE, 512, 7168),
        ("gfx1250", BLOCKSCALE_PRESHUFFLED, 4096, 512),
    }
    assert table.tuned("mi308x", BLOCKSCALE, 512, 7168) and table.tuned("gfx1250", BLOCKSCALE_PRESHUFFLED, 4096, 512)


@pytest.mark.parametrize(
    ("keys", "tuned_at"),
    [
        # aiter's get_gemm_config: an M_LEQ_x bucket at or above M, or an M_GEQ_x bucket at or below it
        (["M_LEQ_4", "any"], {1: True, 4: True, 128: False}),
        (["M_LEQ_64", "M_GEQ_4096", "any"], {1: True, 64: True, 128: False, 4096: True, 9000: True}),
        (["M_GEQ_128"], {1: False, 128: True}),
        (["M_LEQ_8", "any"], {1: True, 128: False}),  # falling through to "any" is not tuned
        (["any"], {1: True, 128: True}),  # no bucket at all: the older format, tuned by existence
        (["M_LEQ_1", "M_LEQ_2"], {1: False}),  # bounds outside STANDARD_M_BOUNDS are never searched
        # the pinned release's format has no tuned flag: the file's existence is the answer
        (["small", "medium_M32", "any"], {1: True, 128: True, 100000: True}),
    ],
)
def test_m_buckets_follow_aiters_rule(tmp_path, keys, tuned_at):
    write(tmp_path, "gfx950-GEMM-A8W8_BLOCKSCALE-N=256-K=512.json", dict.fromkeys(keys, {}))
    table = TritonConfigTable.from_folder(tmp_path)
    for m, expected in tuned_at.items():
        assert table.tuned("mi355x", BLOCKSCALE, 256, 512, m=m) is expected, m


def test_vllm_probes_block_scale_at_128_and_preshuffled_at_1(tmp_path):
    assert PROBE_M == {BLOCKSCALE: 128, BLOCKSCALE_PRESHUFFLED: 1}
    write(tmp_path, "gfx1250-GEMM-A8W8_BLOCKSCALE-N=256-K=512.json", {"M_LEQ_4": {}})
    write(tmp_path, "gfx1250-GEMM-A8W8_BLOCKSCALE_PRESHUFFLED-N=256-K=512.json", {"M_LEQ_4": {}})
    table = TritonConfigTable.from_folder(tmp_path)
    assert not table.tuned("gfx1250", BLOCKSCALE, 256, 512)  # M=128 falls outside M_LEQ_4
    assert table.tuned("gfx1250", BLOCKSCALE_PRESHUFFLED, 256, 512)
    with pytest.raises(ValueError, match="no probe M is known for 'GEMM-A16W16'"):
        table.tuned("gfx1250", "GEMM-A16W16", 256, 512)


def test_unknown_device_names_are_listed_not_guessed(tmp_path):
    write(tmp_path, "R9700-GEMM-A8W8_BLOCKSCALE-N=1024-K=1024.json", {"M_LEQ_4": {}})
    table = TritonConfigTable.from_folder(tmp_path)
    assert len(table) == 0 and len(table.ignored) == 1
    assert "'R9700' maps to no arch (known: MI300X, MI350X, or a gfx name)" in table.ignored[0].reason


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a non-empty JSON object of M buckets, got list"),
        ("{}", "must be a non-empty JSON object of M buckets, got dict"),
    ],
)
def test_malformed_files_are_errors_naming_the_file(tmp_path, content, message):
    path = write(tmp_path, "gfx950-GEMM-A8W8_BLOCKSCALE-N=256-K=512.json", content)
    with pytest.raises(ValueError, match=message) as err:
        TritonConfigTable.from_folder(tmp_path)
    assert str(path) in str(err.value)


def test_paths_that_cannot_be_configs(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TritonConfigTable.from_folder(tmp_path / "missing")
    odd = write(tmp_path, "my-config.json", {"any": {}})
    with pytest.raises(ValueError, match=r"the name must be \{ARCH\}-\{CONFIG\}-N=\{N\}-K=\{K\}\.json"):
        TritonConfigTable.from_folder(odd)
    with pytest.raises(ValueError, match="no paths given"):
        TritonConfigTable.from_folder([])


def test_two_folders_with_one_shape_twice_are_refused(tmp_path):
    write(tmp_path / "a", "gfx950-GEMM-A8W8_BLOCKSCALE-N=256-K=512.json", {"M_LEQ_4": {}})
    write(tmp_path / "b", "MI350X-GEMM-A8W8_BLOCKSCALE-N=256-K=512.json", {"M_LEQ_8": {}})
    with pytest.raises(ValueError, match="two files for GEMM-A8W8_BLOCKSCALE N=256 K=512 on gfx950"):
        TritonConfigTable.from_folder([tmp_path / "a", tmp_path / "b"])


def test_the_policy_hands_its_table_to_every_problem(tmp_path):
    write(tmp_path, "gfx1250-GEMM-A8W8_BLOCKSCALE_PRESHUFFLED-N=4096-K=512.json", {"M_LEQ_4": {}})
    table = TritonConfigTable.from_folder(tmp_path)
    seen = []

    class Spy(md.kernels.kernel_class("torch-reference")):
        def can_implement(self, problem):
            seen.append(problem.triton_configs)
            return super().can_implement(problem)

    policy = md.KernelPolicy(["torch-reference"], triton_configs=table)
    policy.kernel = lambda name: Spy()
    policy.select("kv_b_proj", 4096, 512, "gfx1250")
    assert seen == [table]
    assert md.KernelPolicy(["torch-reference"]).triton_configs.source == TritonConfigTable.default().source
