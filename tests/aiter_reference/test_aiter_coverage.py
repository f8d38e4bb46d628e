"""The vLLM 0.33.0 paths that cannot be checked against the pinned aiter (`scenarios.aiter_coverage`), each
claim held to the installed amd-aiter and the vLLM wheel: vLLM imports the module (or name) at the cited lines,
the pinned release lacks it, and the aiter code the profile does run in those places is there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from aiter_ref import require_aiter
from engine_wheels import require, source

from mla_debug import real_aiter
from mla_debug.scenarios.aiter_coverage import PINNED_AITER, VLLM_0_33_UNCHECKED


def module_file(install: real_aiter.AiterInstall, module: str) -> Path | None:
    parts = module.split(".")[1:]
    for candidate in (
        install.package_dir.joinpath(*parts).with_suffix(".py"),
        install.package_dir.joinpath(*parts, "__init__.py"),
    ):
        if candidate.is_file():
            return candidate
    return None


def defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(getattr(node, "name", None) == name for node in ast.walk(tree))


def test_the_pinned_release_is_the_one_the_list_speaks_of():
    assert PINNED_AITER == real_aiter.PINNED_VERSION


@pytest.mark.parametrize("entry", VLLM_0_33_UNCHECKED, ids=[e.source.function for e in VLLM_0_33_UNCHECKED])
def test_vllm_imports_what_the_pinned_aiter_lacks(entry):
    install = require_aiter()
    require("vllm")
    lines = source("vllm", entry.source.file).splitlines()
    ((first, last),) = entry.source.line_ranges()
    cited = " ".join(line.strip() for line in lines[first - 1 : last])
    assert f"from {entry.module} import" in cited, cited
    found = module_file(install, entry.module)
    if entry.name is None:
        assert found is None, f"{entry.module} is in {install.describe()}: check the path against it"
    else:
        assert entry.name in cited
        assert found is not None and not defines(found, entry.name), f"{entry.name} is in {found}"


def test_the_aiter_code_run_in_their_place_is_there():
    install = require_aiter()
    triton = install.package_dir / "ops" / "triton"
    assert defines(triton / "gemm_a8w8_blockscale.py", "gemm_a8w8_blockscale")
    assert defines(triton / "fused_fp8_quant.py", "fused_rms_fp8_group_quant")
    bmm = "batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant"
    assert defines(triton / f"{bmm}.py", bmm)
    configs = [p.name for p in (triton / "configs" / "gemm").iterdir()]
    assert any("GEMM-A8W8_BLOCKSCALE" in c for c in configs)
    assert not any("A8W8_BLOCKSCALE_PRESHUFFLED" in c for c in configs)
