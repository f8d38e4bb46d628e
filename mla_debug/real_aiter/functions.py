"""aiter's own functions that the project's emulations model, loaded from the pinned amd-aiter.

Each accessor names the file and function it loads (amd-aiter 0.1.7.post2.dev18). The pure-Python ones
run anywhere; those marked Triton import triton and aiter's kernels when called (compiled on a GPU, or
on the CPU under ``TRITON_INTERPRET=1``; launching them is the GPU wing's job, `gpu.aiter_triton`).

- `shuffle_weight`: ``aiter/ops/shuffle.py::shuffle_weight`` (the weight pre-shuffle).
- `torch_group_quant`: ``aiter/ops/quant.py::per_block_quant_wrapper((1, 128))(pertoken_quant)``, the
  torch reference aiter's ``get_torch_quant(QuantType.per_1x128)`` returns.
- `triton_group_quant` (Triton): ``per_block_quant_wrapper((1, 128))(per_token_quant_triton)``, what
  ``get_triton_quant(QuantType.per_1x128)`` returns (kernel ``_dynamic_per_token_quant_fp8_i8_kernel``).
- `merge_tuned_csvs`: ``aiter/jit/core.py::update_config_files``, how aiter merges several tuned CSVs.
- the Triton modules of ``fused_rms_fp8_group_quant`` and ``gemm_a8w8_blockscale``: `load_module`.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import re
import shutil
import types
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .install import require_install
from .modules import FP8_BY_ARCH, load_module
from .source import load_functions

QUANT_FILE = "ops/quant.py"
CORE_FILE = "jit/core.py"
BPRESHUFFLE_TUNED = "a8w8_blockscale_bpreshuffle_tuned_gemm"


def _dtypes(arch: str) -> types.SimpleNamespace:
    """The names of aiter/utility/dtypes.py that the loaded functions read (that module probes the GPU at
    import, so it is not loaded)."""
    return types.SimpleNamespace(
        fp8=FP8_BY_ARCH[arch],
        fp16=torch.float16,
        bf16=torch.bfloat16,
        fp32=torch.float32,
        i8=torch.int8,
        i32=torch.int32,
    )


def shuffle_weight() -> Callable:
    """``aiter.ops.shuffle.shuffle_weight(x, layout=(16, 16), use_int4=False)``."""
    return load_module("aiter.ops.shuffle").shuffle_weight


@functools.lru_cache(maxsize=2)
def torch_group_quant(arch: str = "gfx950") -> Callable:
    """aiter's torch per-1x128 quant: ``fn(x, scale=None, quant_dtype=...) -> (q (M, K), scale (M, K/128))``.

    ``pertoken_quant`` per 128-element row: ``scale = amax / dtype_max`` with no amax floor, an all-zero
    group's scale replaced by 1, ``q = (x / scale).to(dtype)`` (a true division, no clamp).
    """
    path = require_install().path(QUANT_FILE)
    namespace = {"torch": torch, "functools": functools, "dtypes": _dtypes(arch)}
    fns = load_functions(path, ["get_dtype_max", "pertoken_quant", "per_block_quant_wrapper"], namespace)
    return fns["per_block_quant_wrapper"]((1, 128))(fns["pertoken_quant"])


@functools.lru_cache(maxsize=2)
def triton_group_quant(arch: str = "gfx950") -> Callable:
    """aiter's Triton per-1x128 quant (imports triton): ``fn(x, scale=None, quant_dtype=...) -> (q, scale)``.

    ``_dynamic_per_token_quant_fp8_i8_kernel`` per 128-element row: ``scale = amax / dtype_max`` with no
    floor, ``q = (x * (1 / scale)).to(dtype)`` without a clamp: an all-zero group gets scale 0 and NaN bytes.
    Note the kernel's ``tl.assume(pid > 0)``, false for the first row (Triton's interpreter asserts it).
    """
    path = require_install().path(QUANT_FILE)
    namespace = {"torch": torch, "dtypes": _dtypes(arch), "triton": load_module("aiter.ops.triton", arch)}
    fns = load_functions(path, ["per_token_quant_triton", "per_block_quant_wrapper"], namespace)
    return fns["per_block_quant_wrapper"]((1, 128))(fns["per_token_quant_triton"])


@functools.lru_cache(maxsize=1)
def _core_functions() -> dict[str, Callable]:
    install = require_install()
    namespace = {
        "os": os,
        "re": re,
        "logger": logging.getLogger("aiter"),
        # jit/core.py: AITER_ROOT_DIR = abspath(f"{this_dir}/../../"), the folder holding aiter/
        "AITER_ROOT_DIR": str(install.package_dir.parent),
    }
    return load_functions(install.path(CORE_FILE), ["update_config_files", "get_config_file"], namespace)


def merge_tuned_csvs(paths: Sequence[str | os.PathLike], dest: str | os.PathLike) -> Path:
    """Merge tuned-GEMM CSVs exactly as aiter does and write the result to `dest` (needs pandas).

    aiter's ``update_config_files(":".join(paths), merge_name)``: one path is returned as it is; several
    are concatenated, and - when aiter ships the matching *untuned* CSV - sorted by ``us`` and
    deduplicated on the untuned file's columns (M, N, K: no gfx, no cu_num), keeping the fastest row.
    aiter writes the merge to ``/tmp/<merge_name>.csv`` (a fixed path); it is copied to `dest` and removed
    under an exclusive lock on /tmp itself (flock on the directory: no lock file is left behind), so
    concurrent callers never read each other's merge.
    """
    items = [str(Path(p)) for p in paths]
    if not items:
        raise ValueError("merge_tuned_csvs: no paths given")
    merge = _core_functions()["update_config_files"]
    lock = os.open("/tmp", os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = merge(os.pathsep.join(items), BPRESHUFFLE_TUNED)
        shutil.copyfile(merged, dest)
        if len(items) > 1:  # one path is handed back as it is: the caller's file, not aiter's merge
            os.unlink(merged)
    finally:
        os.close(lock)  # closing releases the lock
    return Path(dest)
