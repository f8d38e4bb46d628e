"""The real-aiter loader: AMD's own aiter code (PyPI ``amd-aiter``, one pinned release), run off ROCm.

``import aiter`` needs ROCm (its ``__init__.py`` looks for ``hipconfig`` and JIT-builds HIP modules), but
the code the project's emulations model is plain Python and Triton: the weight shuffle, the torch and
Triton 1x128 quantizers, the fused RMSNorm + FP8 group quant and the block-scale GEMM in Triton, the
tuned-CSV merge. This package runs exactly that code and never executes ``aiter/__init__.py``:

- `install`: where amd-aiter is and whether it is the pinned release (any other is refused, with why);
- `source`: chosen functions of an aiter file compiled without the file's module-level side effects;
- `modules`: aiter's modules (its Triton kernels among them) imported under a stand-in package;
- `functions`: the aiter functions the project models, one accessor each, naming file and function.

It sits at the bottom of the library (it imports nothing of mla_debug): the tuned tables (`kernels`),
the "aiter-triton" kernels and norm + quant backend, and the cross-check tests build on it. Nothing here
imports triton until a Triton accessor is called; launching aiter's Triton kernels is the GPU wing's job
(`mla_debug.gpu.aiter_triton`). Install it with the ``aiter`` extra: ``pip install 'mla-debug[aiter]'``.
"""

from __future__ import annotations

from .install import (
    DISTRIBUTION,
    PINNED_VERSION,
    AiterInstall,
    AiterUnavailable,
    find_install,
    require_install,
    unavailable_reason,
)
from .modules import DEVICE_BY_ARCH, FP8_BY_ARCH, load_module

__all__ = [
    "DEVICE_BY_ARCH",
    "DISTRIBUTION",
    "FP8_BY_ARCH",
    "PINNED_VERSION",
    "AiterInstall",
    "AiterUnavailable",
    "find_install",
    "load_module",
    "require_install",
    "unavailable_reason",
]
