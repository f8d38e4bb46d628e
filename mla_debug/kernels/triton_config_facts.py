"""Facts read from the pinned amd-aiter 0.1.7.post2.dev18: its Triton block-scale GEMM config files.

``aiter/ops/triton/configs/gemm/`` of that release holds specialised ``GEMM-A8W8_BLOCKSCALE`` configs for
eleven (N, K) on MI350X (gfx950) only, in the release's format (keys ``small``, ``medium_M32``,
``medium_M64``, ``medium_M128``, ``any``, or ``any`` alone). It has no ``GEMM-A8W8_BLOCKSCALE_PRESHUFFLED``
file and no file for gfx1250 (nor any gfx-named file). The tests compare these facts with the installed
package when it is there.
"""

from __future__ import annotations

_SIZED = ("small", "medium_M32", "medium_M64", "medium_M128", "any")
_ANY = ("any",)

# (arch, N, K) -> the keys of that MI350X-GEMM-A8W8_BLOCKSCALE-N={N}-K={K}.json.
PINNED_BLOCKSCALE_SHAPES: dict[tuple[str, int, int], tuple[str, ...]] = {
    ("gfx950", 1024, 8192): _ANY,
    ("gfx950", 2112, 7168): _SIZED,
    ("gfx950", 3072, 1536): _SIZED,
    ("gfx950", 32768, 8192): _ANY,
    ("gfx950", 4096, 7168): _SIZED,
    ("gfx950", 4608, 7168): _SIZED,
    ("gfx950", 512, 7168): _SIZED,
    ("gfx950", 7168, 2048): _SIZED,
    ("gfx950", 7168, 256): _SIZED,
    ("gfx950", 8192, 1024): _ANY,
    ("gfx950", 8192, 32768): _ANY,
}
