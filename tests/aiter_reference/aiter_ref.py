"""What the cross-checks against aiter's own code share: the skip rule, where Triton runs, bit comparisons.

The suite skips only where amd-aiter is not installed at all (a bare clone without the ``aiter`` extra);
any other release installed makes the loader refuse it, and the tests fail with its message.
"""

from __future__ import annotations

import contextlib
import importlib.metadata

import pytest
import torch

from mla_debug import real_aiter


def require_aiter() -> real_aiter.AiterInstall:
    """The pinned install; skip (with the reason) only where amd-aiter is not installed."""
    try:
        importlib.metadata.distribution(real_aiter.DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"amd-aiter is not installed ({real_aiter.install.INSTALL_HINT})")
    return real_aiter.require_install()


def triton_device() -> torch.device:
    """Where aiter's Triton kernels run in this test process: the CUDA GPU, else the CPU interpreter
    (tests/conftest.py switches it on before triton is imported on machines without a GPU)."""
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        return torch.device("cuda")
    from mla_debug.gpu import triton_env

    if not triton_env.interpreting() or triton_env.interpreter_error():
        pytest.skip("no CUDA GPU and Triton's interpreter is not usable in this process")
    return torch.device("cpu")


def triton_semantics():
    """Context for launching aiter's Triton kernels: on the CPU interpreter, compiled Triton's rounding and
    ``tl.assume`` (interpreter_casts); compiled on a GPU, nothing to change."""
    if torch.cuda.is_available():
        return contextlib.nullcontext()
    # By its package path, so the engine cross-checks (tests/engine_reference) can share this helper.
    from aiter_reference.interpreter_casts import compiled_semantics

    return compiled_semantics()


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as unsigned integers of its element size, on the CPU, in logical order."""
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]
    return t.detach().contiguous().cpu().view(view)


def assert_same_bits(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    """Bitwise equality (NaN payloads included), with the first differing positions in the message."""
    assert ours.shape == theirs.shape, f"{what}: shape {tuple(ours.shape)} vs aiter's {tuple(theirs.shape)}"
    assert ours.dtype == theirs.dtype, f"{what}: dtype {ours.dtype} vs aiter's {theirs.dtype}"
    a, b = bits(ours), bits(theirs)
    differ = (a != b).nonzero()
    if len(differ):
        where = [tuple(i.tolist()) for i in differ[:5]]
        sample = [(a[w].item(), b[w].item()) for w in where]
        raise AssertionError(
            f"{what}: {len(differ)} of {a.numel()} elements differ from aiter's, first at {where}: {sample}"
        )
