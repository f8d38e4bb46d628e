"""Launch configurations of the Triton GEMM: what the heuristic and the autotuner may pick is runnable.

Pure Python (no GPU, no interpreter), over random problem sizes and SM counts.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.kernels.triton_gemm import BLOCK, _candidates, _heuristic

sizes = dict(
    m=st.integers(1, 1 << 16),
    n=st.integers(1, 4096).map(lambda b: 16 * b),
    k=st.integers(1, 128).map(lambda b: BLOCK * b),
    sms=st.integers(1, 200),
    fnuz=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(**sizes)
def test_every_config_that_can_be_picked_fits_the_kernel(m, n, k, sms, fnuz):
    for cfg in _candidates(m, n, k, sms, fnuz):
        # the kernel's rules: one weight-scale block per tile, wgmma-sized row tiles, and every split
        # has K blocks to sum (an empty split would only add zeros)
        assert BLOCK % cfg.block_n == 0 and cfg.block_m >= 16 and cfg.num_warps in (4, 8)
        assert cfg.split_k <= k // BLOCK


@settings(max_examples=200, deadline=None)
@given(**sizes)
def test_the_heuristic_gives_every_sm_a_tile_for_few_tokens(m, n, k, sms, fnuz):
    cfg = _heuristic(min(m, 16), n, k, sms, fnuz)
    tiles = -(-n // cfg.block_n) * cfg.split_k
    assert tiles >= sms or cfg.block_n == 16
