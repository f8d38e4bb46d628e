"""The GPU wing's boundary: only mla_debug/gpu imports triton, it builds on numerics and layouts only, and
the library - the triton-* kernels and the "triton" norm + quant backend included - imports and runs its
CPU paths where triton is missing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mla_debug"
GPU = PACKAGE / "gpu"
# What gpu/ may import from the library: the layers below it, the real-aiter loader (which sits at the
# bottom and imports nothing of the library), and the package's private helpers.
GPU_MAY_IMPORT = {"numerics", "layouts", "_checks", "gpu", "real_aiter"}


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in a file, at any depth (function-level included)."""
    # The package relative imports start from: a module's folder, which for __init__.py is its own.
    package = ".".join(path.relative_to(PACKAGE.parent).parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import module` names modules too: count them, so that a relative import of a
            # sibling package (`from .. import gpu`) is seen.
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names] or [(base, node.lineno)]
    return found


def test_only_the_gpu_package_imports_triton():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for path in PACKAGE.rglob("*.py")
        if GPU not in path.parents
        for name, line in imported_modules(path)
        if name == "triton" or name.startswith("triton.")
    ]
    assert not offenders, "triton is imported outside mla_debug/gpu:\n" + "\n".join(offenders)


def test_the_gpu_package_builds_on_numerics_and_layouts_only():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
        for path in GPU.rglob("*.py")
        for name, line in imported_modules(path)
        if name.startswith("mla_debug.") and name.split(".")[1] not in GPU_MAY_IMPORT
    ]
    assert not offenders, "mla_debug/gpu reaches above its layer:\n" + "\n".join(offenders)


def test_the_library_imports_and_runs_on_the_cpu_without_triton():
    # A meta-path entry of None makes every `import triton` fail as on a machine without it.
    code = """
import sys
sys.modules["triton"] = None
import torch
import mla_debug as md
from mla_debug.gpu import triton_env
from mla_debug.gpu.gemm import launcher
from mla_debug.gpu.normquant import launch, support

assert "not importable" in triton_env.import_error()
assert launcher.triton_status() == (False, triton_env.import_error())
kernel = md.get_kernel("triton-blockscale")
ok, why = kernel.availability()
assert ok and "emulation" in why and "not importable" in why, why
strict = md.get_kernel("triton-bpreshuffle", backend="triton")
assert strict.availability()[0] is False
weight = md.layouts.quantize_blocks(torch.randn(256, 256, generator=torch.Generator().manual_seed(0)) * 0.02)
linear = md.kernels.BlockScaledLinear("w", weight).attach(kernel)
x = torch.randn(3, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
assert linear(kernel.quantize_input(x, weight.fmt)).shape == (3, 256)
assert "not importable" in support.triton_unavailable_reason(torch.device("cuda"))
assert [m for m in sys.modules if m.startswith("triton")] == ["triton"]
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
