"""aiter's own ``getPaddedM`` (csrc/py_itfs_cu/gemm_common.cu), compiled on this machine and called in-process.

The function is plain C++; only its header pulls in torch's extension headers, for a declaration. It is
compiled against a one-line stand-in header instead, with the host C++ compiler, once per test session.
"""

from __future__ import annotations

import ctypes
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from mla_debug import real_aiter

SOURCE = "csrc/py_itfs_cu/gemm_common.cu"
SYMBOL = "_Z10getPaddedMiiii"  # getPaddedM(int, int, int, int), C++ name mangling (Itanium ABI)


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    compiler = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler here to build aiter's getPaddedM")
    install = real_aiter.require_install()
    source = install.package_dir.parent / "aiter_meta" / SOURCE
    if not source.is_file():
        raise FileNotFoundError(f"amd-aiter {install.version} has no aiter_meta/{SOURCE}")
    build = Path(tempfile.mkdtemp(prefix="aiter_padded_m_"))
    (build / "gemm_common.h").write_text("#pragma once\nint getPaddedM(int M, int N, int K, int gl);\n")
    library = build / "libpaddedm.so"
    cmd = [compiler, "-x", "c++", "-std=c++17", "-O1", "-shared", "-fPIC", "-include", "climits"]
    cmd += ["-I", str(build), str(source), "-o", str(library)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"compiling aiter's {SOURCE} failed: {done.stderr[-2000:]}")
        return ctypes.CDLL(str(library))  # once loaded, the mapping outlives the file
    finally:
        shutil.rmtree(build, ignore_errors=True)


def get_padded_m(m: int, n: int, k: int, granularity: int) -> int:
    fn = getattr(_library(), SYMBOL)
    fn.argtypes = [ctypes.c_int] * 4
    fn.restype = ctypes.c_int
    return fn(m, n, k, granularity)
