"""Launch configurations of the Triton GEMM: what the heuristic and the autotuner may pick is runnable.

Pure Python (no GPU, no interpreter), over random problem sizes and SM counts.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.gpu.gemm.launcher import (
    BLOCK,
    _candidates,
    _heuristic,
    gluon_fits,
    interleaved_config,
    interleaved_stage_bytes,
    interleaved_stages,
    overlap_fits,
    specialized_shared_bytes,
)

sizes = dict(
    m=st.integers(1, 1 << 16),
    n=st.integers(1, 4096).map(lambda b: 16 * b),
    k=st.integers(1, 128).map(lambda b: BLOCK * b),
    sms=st.integers(1, 200),
    fnuz=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(**sizes, gluon=st.booleans())
def test_every_config_that_can_be_picked_fits_the_kernel(m, n, k, sms, fnuz, gluon):
    for cfg in _candidates(m, n, k, sms, fnuz, gluon):
        # the kernel's rules: one weight-scale block per tile, wgmma-sized row tiles, and every split
        # has K blocks to sum (an empty split would only add zeros)
        assert BLOCK % cfg.block_n == 0 and cfg.block_m >= 16 and cfg.num_warps in (4, 8)
        assert cfg.split_k <= k // BLOCK
        # the overlapped loops only where the Gluon kernels run them: e4m3fn on sm_90, wgmma tiles, one K
        # range, an even block count (persistent: at least stages - 1 blocks)
        if cfg.specialized:  # its 128 x 128 tiles, stages within a program's shared memory
            assert gluon and not fnuz and (cfg.block_m, cfg.block_n, cfg.split_k) == (128, 128, 1)
            assert specialized_shared_bytes(cfg) <= 227 * 1024
        elif cfg.overlap or cfg.persistent:
            assert gluon and not fnuz and overlap_fits(cfg, k) and gluon_fits(cfg, shuffled=False)
        assert not cfg.tma_store or cfg.specialized


@settings(max_examples=300, deadline=None)
@given(**sizes)
def test_large_m_overlaps_where_the_gluon_kernels_run(m, n, k, sms, fnuz):
    """The measured rules (_overlapped): the persistent warp-specialized kernel with TMA stores from
    M = 1024, and from M = 65 where its 128 x 128 tiles give every SM one, 5 stages; otherwise, or where it cannot run,
    from M = 1024 the persistent overlapped loop over 3-4 K blocks, the overlapped loop above M = 1024 or
    over 64+ blocks; nothing changes without Gluon."""
    plain = _heuristic(m, n, k, sms, fnuz, False)
    cfg = _heuristic(m, n, k, sms, fnuz, True)
    fallback = _heuristic(m, n, k, sms, fnuz, True, specialized=False)
    assert not (plain.overlap or plain.persistent or plain.specialized)
    assert not fallback.specialized
    k_blocks = k // BLOCK
    tiles = -(-m // BLOCK) * -(-n // BLOCK)
    if fnuz:
        assert cfg == fallback == plain
        return
    assert cfg.specialized == (m >= 1024 or (m > 64 and tiles >= sms))
    if cfg.specialized:
        assert cfg.persistent and cfg.tma_store and (cfg.block_m, cfg.block_n, cfg.split_k) == (128, 128, 1)
        assert cfg.num_stages == 5 and specialized_shared_bytes(cfg) <= 227 * 1024
    else:
        assert cfg == fallback
    if m < 1024 or k_blocks % 2:
        assert fallback == plain
    elif k_blocks == 4:
        assert fallback.persistent and (fallback.block_m, fallback.block_n, fallback.num_warps) == (128, 128, 8)
    elif m > 1024 or k_blocks >= 64:
        assert fallback.overlap and not fallback.persistent and (fallback.block_m, fallback.block_n) == (128, 128)
    else:
        assert fallback == plain


@settings(max_examples=200, deadline=None)
@given(**sizes)
def test_decode_launches_keep_every_sm_streaming(m, n, k, sms, fnuz):
    m = min(m, 64)
    cfg = _heuristic(m, n, k, sms, fnuz)
    k_blocks = k // BLOCK
    programs = -(-m // cfg.block_m) * -(-n // cfg.block_n) * cfg.split_k
    if k_blocks > 16:
        # long K: 64-wide tiles, K split until there are enough programs (2 per SM for 16-row tiles, 1 for
        # 64-row ones), unless the splits would get fewer than 4 K blocks; and no split more than needed
        wanted = 2 * sms if cfg.block_m == 16 else sms
        assert cfg.block_n == 64 and 1 <= cfg.split_k <= 8 and k_blocks // cfg.split_k >= 4
        assert programs >= wanted or cfg.split_k == 8 or k_blocks // (2 * cfg.split_k) < 4
        assert cfg.split_k == 1 or programs // 2 < wanted
    else:
        # short K: never split; 16-row tiles narrowed (down to 32 wide) until half the SMs have one
        assert cfg.split_k == 1 and (programs >= sms // 2 or cfg.block_n == 32 or cfg.block_m == 64)


@settings(max_examples=200, deadline=None)
@given(**sizes)
def test_the_interleaved_kernel_only_deepens_or_shallows_the_pipeline(m, n, k, sms, fnuz):
    base = _heuristic(m, n, k, sms, fnuz)
    cfg = interleaved_stages(base, m, n, k, sms)
    # Stages change no arithmetic: everything else stays, so the bytes stay the plain kernel's.
    assert dataclasses.replace(cfg, num_stages=base.num_stages) == base
    assert 3 <= cfg.num_stages <= 12
    stage_bytes = (cfg.block_m + cfg.block_n) * BLOCK + 8 * cfg.block_m  # tiles, and both scales per row
    assert interleaved_stage_bytes(cfg) == stage_bytes
    assert cfg.num_stages * stage_bytes <= 200 * 1024
    programs = -(-m // base.block_m) * -(-n // base.block_n) * base.split_k
    if base.block_m >= 128:  # one program per SM (registers): one stage deeper than the plain kernel
        assert cfg.num_stages == 4
    elif programs <= sms and m > 1:  # an SM to itself: at least as deep as the plain kernel's pipeline
        assert cfg.num_stages >= min(base.num_stages, 200 * 1024 // stage_bytes)
    elif programs >= 2 * sms and m > 64:  # three programs per SM, or two where the grid takes fewer slots
        assert cfg.num_stages in (3, 4)
        per_sm = {s: 228 * 1024 // (s * stage_bytes + 1024) for s in (3, 4)}
        slots = {s: -(-programs // (sms * per_sm[s])) * per_sm[s] for s in (3, 4)}
        long_k = k // BLOCK // base.split_k >= 16
        assert (cfg.num_stages == 4) == (slots[4] <= 0.75 * slots[3] or (slots[4] < slots[3] and long_k))
    else:
        assert cfg == base


@settings(max_examples=200, deadline=None)
@given(**sizes)
def test_the_preshuffled_weight_overlaps_only_where_measured(m, n, k, sms, fnuz):
    """interleaved_config: the depth rule, or the overlapped loop (4 stages) for 64-row tiles over 16+ K
    blocks at 64 < M <= 1024 where its grid takes no more waves - the tiles never change."""
    base = _heuristic(m, n, k, sms, fnuz, not fnuz)
    cfg = interleaved_config(base, m, n, k, sms)
    deep = interleaved_stages(base, m, n, k, sms)
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.split_k) == (
        base.block_m,
        base.block_n,
        base.num_warps,
        base.split_k,
    )
    if cfg == deep:
        return
    assert cfg == dataclasses.replace(base, overlap=True, num_stages=4)
    assert base.block_m == 64 and 64 < m <= 1024 and k // BLOCK >= 16 and (k // BLOCK) % 2 == 0
    programs = -(-m // 64) * -(-n // base.block_n)
    per_sm = 228 * 1024 // (deep.num_stages * interleaved_stage_bytes(deep) + 1024)
    assert -(-programs // (2 * sms)) <= -(-programs // (sms * per_sm))


def test_the_measured_preshuffled_cases_take_the_overlapped_loop():
    # (At M = 1024 where the warp-specialized kernel cannot run.)
    def pick(m, n, k):
        return interleaved_config(_heuristic(m, n, k, 132, False, True, specialized=False), m, n, k, 132)

    assert pick(256, 7168, 16384).overlap and pick(256, 7168, 2048).overlap and pick(1024, 7168, 2048).overlap
    assert pick(256, 2112, 7168).overlap
    assert not pick(1024, 2112, 7168).overlap  # 272 tiles: two waves of 264 against one of 396
    assert not pick(256, 24576, 1536).overlap  # 12 K blocks


def test_64_row_tiles_go_4_deep_where_the_grid_then_takes_fewer_program_slots():
    def depth(m, n, k):
        return interleaved_stages(_heuristic(m, n, k, 132, False), m, n, k, 132).num_stages

    assert depth(1024, 4096, 512) == 4  # 512 tiles: 2 waves of 396 (3 deep) or of 264 (4 deep)
    assert depth(1024, 7168, 16384) == 4  # 896 tiles: 3 waves of 396 or 4 of 264, a long K
    assert depth(1024, 7168, 2048) == 4  # the same grid, 16 K blocks
    assert depth(256, 32768, 512) == 3  # 8 slots per SM against 9, but 4 K blocks
    assert depth(1024, 32768, 512) == 3  # 4096 tiles: 16 x 264 against 11 x 396, 3% fewer
    assert depth(1024, 2112, 7168) == 3  # 272 tiles: one wave of 396, or two of 264
    assert depth(1024, 24576, 1536) == 3  # 3072 tiles: as full either way; more programs per SM


def test_a_single_token_takes_128_wide_tiles_only_where_they_still_cover_the_sms():
    assert _heuristic(1, 24576, 1536, 132, False).block_n == 128  # 192 tiles
    assert _heuristic(1, 32768, 512, 132, False).block_n == 128
    assert _heuristic(1, 7168, 2048, 132, False).block_n == 64  # 56 tiles would leave SMs idle
    assert _heuristic(16, 24576, 1536, 132, False).block_n == 64  # measured as fast or faster 64 wide
    assert _heuristic(1, 7168, 16384, 132, False).block_n == 64  # long K: split instead


def test_a_decode_grid_is_fitted_into_fewer_waves_where_fewer_stages_allow_it():
    # 512 tiles of 64x64 on 132 SMs: 3 per SM with 4 stages (two waves), 4 per SM with 3 (one).
    assert _heuristic(64, 32768, 512, 132, False).num_stages == 3
    # 384 tiles already fit in one wave with 4 stages: unchanged.
    assert _heuristic(64, 24576, 1536, 132, False).num_stages == 4


def test_launch_config_asks_the_heuristic_with_the_devices_facts(monkeypatch):
    """An H200-like device (132 SMs, Gluon on sm_90) gets the heuristic's Gluon choice: at M = 4096 the
    warp-specialized kernel."""
    import torch

    from mla_debug.gpu import triton_env
    from mla_debug.gpu.gemm import launcher

    monkeypatch.setattr(triton_env, "sm_count", lambda device: 132)
    monkeypatch.setattr(triton_env, "hopper_gluon", lambda device: True)
    device = torch.device("cpu")
    for m, n, k in ((4096, 4096, 512), (1, 7168, 2048), (300, 2112, 7168)):
        assert launcher.launch_config(m, n, k, device) == _heuristic(m, n, k, 132, False, True)
    assert launcher.launch_config(4096, 4096, 512, device).specialized
    assert launcher.launch_config(4096, 4096, 512, device, fnuz=True) == _heuristic(4096, 4096, 512, 132, True)
