"""The distinct (N, K) shapes with rows in aiter's bpreshuffle tuned-GEMM tables, per (gfx, cu_num).

Facts read from aiter at commit e4048607a535 (configs/a8w8_blockscale_bpreshuffle_tuned_gemm.csv merged
with every configs/model_configs/*a8w8_blockscale_bpreshuffle_tuned_gemm*.csv). They decide whether
vLLM after PR #51692 picks the preshuffled kernel for a layer; M is not part of that decision.
"""

from __future__ import annotations

AITER_COMMIT = "e4048607a535"

_SHAPES = {
    ("gfx942", 80): """
        128x7168 1536x4096 2048x2048 2112x7168 2240x7168 2624x6144 3072x6144 3072x7168 4096x1024
        4096x2048 4096x7168 4608x4096 4608x7168 5120x4096 6144x1536 6144x2048 7168x7168 8192x1024
        8192x7168 11264x7168 36864x7168
    """,
    ("gfx950", 256): """
        16x4096 32x4096 128x6144 128x7168 256x512 512x256 512x512 512x1024 512x2048 512x7168
        576x7168 768x7168 1024x256 1024x512 1024x1024 1024x2048 1024x4096 1152x2048 1280x4096 1536x2048
        1536x7168 2048x512 2048x1024 2048x2048 2048x4096 2048x7168 2112x7168 2176x4096 2240x7168 2304x2048
        2304x4096 2560x4096 2624x6144 3072x1536 3072x2048 3072x3072 3072x6144 3584x512 4096x512 4096x1024
        4096x1280 4096x2048 4096x3072 4096x4096 4096x8192 4352x4096 4608x2048 4608x4096 4608x7168 5120x4096
        6144x1536 6144x2048 6144x4096 6144x7168 7168x256 7168x384 7168x768 7168x2048 7168x2304 7168x3072
        7168x4096 7168x4608 7168x7168 7168x16384 8192x512 8192x1536 8192x3072 8704x4096 9216x2048 9216x4096
        9216x7168 10240x4096 11264x1536 12288x2048 14336x1536 16384x1536 17408x4096 20480x4096 65536x1536
    """,
    ("gfx1250", 256): """
        1536x4096 1536x7168 2048x7168 4096x2048 4096x4096 4096x8192 6144x7168 7168x768 7168x3072
        7168x4096 7168x16384 8192x1024 8192x1536 16384x1536 32768x1024 65536x1536
    """,
}


def embedded_shapes() -> dict[tuple[str, int], frozenset[tuple[int, int]]]:
    """{(gfx, cu_num): {(N, K), ...}} as listed above."""
    result = {}
    for key, text in _SHAPES.items():
        pairs = (token.split("x") for token in text.split())
        result[key] = frozenset((int(n), int(k)) for n, k in pairs)
    return result
