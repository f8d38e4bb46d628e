"""Where Triton can run in this process: importable, on which GPU, compiled or interpreted.

Shared by the GEMM (gpu/gemm) and the norm + quant (gpu/normquant) launchers. Nothing here imports
triton at module import; the answers that need the driver or the import are cached.
"""

from __future__ import annotations

import functools
import os

import torch


def interpreting() -> bool:
    """Whether Triton's interpreter is switched on (TRITON_INTERPRET, parsed as Triton parses it)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


@functools.lru_cache(maxsize=1)
def import_error() -> str | None:
    """None when triton imports, else why not (with the install hint)."""
    try:
        import triton  # noqa: F401
    except ImportError as err:
        return f"triton is not importable ({err}); install it with pip install 'mla-debug[gpu]'"
    return None


def version() -> str:
    """triton's version; call only when `import_error()` is None."""
    import triton

    return triton.__version__


def library_interpreted() -> bool:
    """Whether triton.language was imported in interpreter mode.

    Triton's own helpers (tl.cdiv, tl.sum, ...) are ``@triton.jit`` functions decorated when triton is
    imported; an interpreted kernel cannot call compiled ones, so TRITON_INTERPRET=1 set after the
    import does not work.
    """
    import triton.language as tl

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - a triton without the interpreter class
        return True
    return isinstance(tl.cdiv, InterpretedFunction)


def interpreter_error() -> str | None:
    """Why the interpreter, though switched on, cannot run here (None when it can or is off)."""
    if interpreting() and not library_interpreted():
        return (
            "TRITON_INTERPRET=1 was set after triton had been imported without it; triton decides at import "
            "whether its library runs compiled or interpreted, so set it before anything imports triton"
        )
    return None


# Cached: asked on every launch, and asking the driver for a device name takes microseconds.
@functools.lru_cache(maxsize=1)
def cuda_gpu_name() -> str | None:
    """The NVIDIA GPU torch sees (None without one, or on a ROCm build of torch)."""
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        return None
    return torch.cuda.get_device_name()


@functools.lru_cache(maxsize=16)
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (4 elsewhere: launch heuristics only need a number)."""
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=16)
def hopper_gluon(device: torch.device) -> bool:
    """Whether `device` is a Hopper GPU (sm_90) and this triton has the Gluon dialect with its Hopper
    operations (wgmma, cp.async): what the Gluon kernels need (they are written for sm_90's tensor cores)."""
    if device.type != "cuda" or interpreting() or import_error() is not None:
        return False
    if torch.cuda.get_device_capability(device) != (9, 0):
        return False
    try:
        from triton.experimental import gluon  # noqa: F401
        from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma  # noqa: F401
    except ImportError:
        return False
    return True
