"""Giving freed heap memory back to the operating system.

glibc serves tensors between its mmap threshold (128 KiB, raised on every free of an mmapped block, up to
32 MiB) and that ceiling from its heap, and a heap page freed in the middle stays resident. A triage
that moves from one TP size's weights to the next frees hundreds of MB that way; measured on `make demo`,
the peak resident set is ~0.45 GB higher without a trim (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc_trim():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None)  # glibc only: musl and macOS lack it
    except OSError:
        return None


def return_freed_memory() -> bool:
    """Ask the C allocator to release free heap pages (glibc's ``malloc_trim(0)``). True if it ran."""
    trim = _libc_trim()
    if trim is None:
        return False
    trim(0)
    return True
