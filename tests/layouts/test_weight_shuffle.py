"""aiter's weight pre-shuffle (docs/semantics.md §6) against an oracle written from its plain-words definition.

"In each band of IN rows, regard the band as an IN x U matrix of 16-byte units and store it transposed."
The oracle below implements exactly that sentence with Python index loops over numpy bytes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts import (
    LAYOUTS,
    is_involution,
    pad_k,
    shuffle_period,
    shuffle_weight,
    unshuffle_weight,
)

FP8 = torch.float8_e4m3fn
DTYPES = [FP8, torch.float8_e4m3fnuz, torch.bfloat16, torch.float16, torch.int8, torch.float32]
UNIT = 16
PROPS = settings(max_examples=40, deadline=None)


def make_weight(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random bytes whose every 16-byte unit is distinct (its index is stamped in its first 3 bytes)."""
    *lead, n, k = shape
    size = torch.empty((), dtype=dtype).element_size()
    row_bytes = k * size
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (*lead, n, row_bytes), dtype=torch.uint8, generator=gen)
    units = raw.view(-1, UNIT) if row_bytes % UNIT == 0 else None
    if units is not None:
        index = torch.arange(units.shape[0])
        units[:, 0] = (index & 0xFF).to(torch.uint8)
        units[:, 1] = ((index >> 8) & 0xFF).to(torch.uint8)
        units[:, 2] = ((index >> 16) & 0xFF).to(torch.uint8)
    return raw.view(dtype)


def as_bytes(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.uint8).numpy().copy()


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(as_bytes(a), as_bytes(b))


def oracle_shuffle(w: torch.Tensor, layout: tuple[int, int]) -> torch.Tensor:
    """The plain-words definition with explicit loops: transpose each band's IN x U unit matrix."""
    band = layout[0]
    n, k = w.shape[-2], w.shape[-1]
    src = as_bytes(w).reshape(-1, n, k * w.element_size())
    row_bytes = src.shape[-1]
    units = row_bytes // UNIT
    dst = np.zeros_like(src)
    for b in range(src.shape[0]):
        for band_start in range(0, n, band):
            # Unit (r, u) of the band's IN x U matrix goes to position u * IN + r of the transposed
            # U x IN matrix; the band's bytes are that matrix read row by row.
            for r in range(band):
                for u in range(units):
                    pos = u * band + r
                    out_row, out_unit = divmod(pos, units)
                    dst[b, band_start + out_row, out_unit * UNIT : (out_unit + 1) * UNIT] = src[
                        b, band_start + r, u * UNIT : (u + 1) * UNIT
                    ]
    return torch.from_numpy(dst).reshape(*w.shape[:-1], row_bytes).view(w.dtype)


def oracle_unshuffle(w: torch.Tensor, layout: tuple[int, int]) -> torch.Tensor:
    """Inverse, also with loops: unit at position u * IN + r of the band goes back to (r, u)."""
    band = layout[0]
    n, k = w.shape[-2], w.shape[-1]
    src = as_bytes(w).reshape(-1, n, k * w.element_size())
    row_bytes = src.shape[-1]
    units = row_bytes // UNIT
    dst = np.zeros_like(src)
    for b in range(src.shape[0]):
        for band_start in range(0, n, band):
            for r in range(band):
                for u in range(units):
                    in_row, in_unit = divmod(u * band + r, units)
                    dst[b, band_start + r, u * UNIT : (u + 1) * UNIT] = src[
                        b, band_start + in_row, in_unit * UNIT : (in_unit + 1) * UNIT
                    ]
    return torch.from_numpy(dst).reshape(*w.shape[:-1], row_bytes).view(w.dtype)


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ----------------------------------------------------------------------------------- oracle tests


@pytest.mark.parametrize("dtype", [FP8, torch.bfloat16, torch.int8, torch.float32])
@pytest.mark.parametrize("layout", [(16, 16), (32, 16)])
@pytest.mark.parametrize("lead", [(), (2,), (2, 3)])
def test_shuffle_matches_plain_words_oracle(dtype, layout, lead):
    band = layout[0]
    for n, k in [(band, 32), (2 * band, 64), (band, 96)]:
        w = make_weight((*lead, n, k), dtype, seed=n + k)
        before = as_bytes(w)
        got = shuffle_weight(w, layout)
        assert got.shape == w.shape and got.dtype == w.dtype
        assert same_bytes(got, oracle_shuffle(w, layout))
        assert np.array_equal(as_bytes(w), before), "shuffle_weight must not modify its input"
        assert same_bytes(unshuffle_weight(got, layout), w)
        assert same_bytes(unshuffle_weight(w, layout), oracle_unshuffle(w, layout))


def test_oracle_on_a_hand_checked_case():
    # One fp8 band of 16 rows x 32 columns: U = 2 units per row. Transposed, row 0 of the result holds
    # unit 0 of rows 0 and 1, row 1 holds unit 0 of rows 2 and 3, ..., row 8 holds unit 1 of rows 0 and 1.
    rows = torch.arange(16, dtype=torch.uint8).repeat_interleave(32).view(16, 32)
    cols = (torch.arange(32, dtype=torch.uint8) // 16 * 128).expand(16, 32)
    w = (rows + cols).view(FP8)  # byte = row + 128 * unit
    got = shuffle_weight(w).view(torch.uint8)
    for out_row in range(16):
        for half in range(2):
            pos = out_row * 2 + half
            u, r = divmod(pos, 16)
            assert got[out_row, half * 16 : half * 16 + 16].tolist() == [r + 128 * u] * 16
    assert same_bytes(got.view(FP8), oracle_shuffle(w, (16, 16)))


def test_bands_are_independent():
    w = make_weight((64, 64), FP8, seed=3)
    got = shuffle_weight(w)
    for b in range(4):
        assert same_bytes(got[16 * b : 16 * (b + 1)], shuffle_weight(w[16 * b : 16 * (b + 1)].contiguous()))


def test_non_contiguous_input_is_shuffled_by_its_values():
    base = make_weight((64, 32), FP8, seed=5)
    w = base.t()  # (32, 64), not contiguous
    assert not w.is_contiguous()
    assert same_bytes(shuffle_weight(w), oracle_shuffle(w.contiguous(), (16, 16)))
    b16 = make_weight((2, 64, 32), torch.bfloat16, seed=6).transpose(-1, -2)  # (2, 32, 64)
    assert not b16.is_contiguous()
    assert same_bytes(shuffle_weight(b16), oracle_shuffle(b16, (16, 16)))


@PROPS
@given(
    bands=st.integers(1, 3),
    k_blocks=st.integers(1, 4),
    dtype=st.sampled_from(DTYPES),
    layout=st.sampled_from(LAYOUTS),
    lead=st.sampled_from([(), (1,), (2,)]),
    seed=st.integers(0, 2**16),
)
def test_shuffle_oracle_property(bands, k_blocks, dtype, layout, lead, seed):
    w = make_weight((*lead, bands * layout[0], k_blocks * 2 * layout[1]), dtype, seed)
    assert same_bytes(shuffle_weight(w, layout), oracle_shuffle(w, layout))


# ---------------------------------------------------------------------------------------- round trips


@PROPS
@given(
    bands=st.integers(1, 4),
    k_blocks=st.integers(1, 8),
    dtype=st.sampled_from(DTYPES),
    layout=st.sampled_from(LAYOUTS),
    lead=st.sampled_from([(), (3,), (2, 2)]),
    seed=st.integers(0, 2**16),
)
def test_unshuffle_and_shuffle_are_inverse(bands, k_blocks, dtype, layout, lead, seed):
    w = make_weight((*lead, bands * layout[0], k_blocks * 2 * layout[1]), dtype, seed)
    s = shuffle_weight(w, layout)
    u = unshuffle_weight(w, layout)
    assert s.shape == w.shape and s.dtype == w.dtype and u.shape == w.shape and u.dtype == w.dtype
    assert same_bytes(unshuffle_weight(s, layout), w)
    assert same_bytes(shuffle_weight(u, layout), w)


# -------------------------------------------------------------------------------- involution / period


@pytest.mark.parametrize(
    "dtype,k,layout,involution",
    [
        (FP8, 256, (16, 16), True),
        (torch.bfloat16, 128, (16, 16), True),
        (torch.int8, 256, (16, 16), True),
        (torch.float32, 64, (16, 16), True),
        (FP8, 512, (16, 16), False),
        (FP8, 128, (16, 16), False),
        (FP8, 32, (16, 16), False),
        (torch.bfloat16, 256, (16, 16), False),
        (torch.bfloat16, 64, (16, 16), False),
        (FP8, 256, (32, 16), False),
        (FP8, 512, (32, 16), True),  # U == IN == 32: a 512-byte row for 32-row bands
        (torch.bfloat16, 128, (32, 16), False),
    ],
)
def test_shuffle_is_an_involution_exactly_for_square_unit_matrices(dtype, k, layout, involution):
    w = make_weight((2 * layout[0], k), dtype, seed=k)
    once = shuffle_weight(w, layout)
    assert not same_bytes(once, w)  # distinct units: a shuffle always moves something
    assert same_bytes(shuffle_weight(once, layout), w) == involution
    assert is_involution(k, element_size(dtype), layout) == involution
    assert (shuffle_period(k, element_size(dtype), layout) == 2) == involution


@settings(max_examples=30, deadline=None)
@given(k_blocks=st.integers(1, 24), dtype=st.sampled_from([FP8, torch.bfloat16]))
def test_16x16_involution_iff_256_byte_rows(k_blocks, dtype):
    k = 32 * k_blocks
    w = make_weight((16, k), dtype, seed=k_blocks)
    twice = shuffle_weight(shuffle_weight(w))
    assert same_bytes(twice, w) == (k * element_size(dtype) == 256)


def empirical_period(w: torch.Tensor, layout: tuple[int, int], limit: int = 5000) -> int:
    current = shuffle_weight(w, layout)
    count = 1
    while not same_bytes(current, w):
        current = shuffle_weight(current, layout)
        count += 1
        assert count <= limit, "no period found"
    return count


@settings(max_examples=40, deadline=None)
@given(
    k_blocks=st.integers(1, 8),
    dtype=st.sampled_from([FP8, torch.bfloat16, torch.float32]),
    layout=st.sampled_from(LAYOUTS),
    bands=st.integers(1, 2),
)
def test_shuffle_period_matches_empirical_count(k_blocks, dtype, layout, bands):
    k = 32 * k_blocks
    w = make_weight((bands * layout[0], k), dtype, seed=k)
    period = empirical_period(w, layout)
    assert shuffle_period(k, element_size(dtype), layout) == period
    assert is_involution(k, element_size(dtype), layout) == (period <= 2)


def test_shuffle_period_known_values():
    assert shuffle_period(256, 1) == 2
    assert shuffle_period(128, 2) == 2
    assert shuffle_period(7168, 1) == shuffle_period(3584, 2)  # only the row's byte width matters
    assert shuffle_period(512, 1) == 9  # order of 16 modulo 511
    assert shuffle_period(128, 1) == 7  # order of 16 modulo 127
    assert shuffle_period(64, 1) == 3  # order of 16 modulo 63
    assert shuffle_period(128, 1, (32, 16)) == 8  # order of 32 modulo 255


# ----------------------------------------------------------------------------------------- K padding


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(1, 300),
    pad_to=st.sampled_from([32, 64, 128, 256]),
    dtype=st.sampled_from([FP8, torch.bfloat16, torch.int8]),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**16),
)
def test_pad_k_to_zero_pads_then_shuffles(k, pad_to, dtype, layout, seed):
    n = layout[0]
    w = make_weight((n, k), dtype, seed)
    width = -(-k // pad_to) * pad_to
    out = shuffle_weight(w, layout, pad_k_to=pad_to)
    assert out.dtype == w.dtype and tuple(out.shape) == (n, width)
    # Independent padding: the original bytes, then zero bytes up to the padded width.
    padded_bytes = np.zeros((n, width * element_size(dtype)), dtype=np.uint8)
    padded_bytes[:, : k * element_size(dtype)] = as_bytes(w)
    padded = torch.from_numpy(padded_bytes).view(dtype)
    assert same_bytes(out, oracle_shuffle(padded, layout))
    assert same_bytes(unshuffle_weight(out, layout, k=k), w)
    assert same_bytes(unshuffle_weight(out, layout), padded)
    assert same_bytes(pad_k(w, pad_to), padded)


def test_pad_k_to_is_a_no_op_when_aligned():
    w = make_weight((2, 32, 256), FP8, seed=1)
    assert same_bytes(shuffle_weight(w, pad_k_to=128), shuffle_weight(w))
    assert pad_k(w, 64) is w


def test_pad_k_to_a_width_the_shuffle_cannot_take():
    w = make_weight((16, 10), FP8)
    with pytest.raises(ValueError, match="K=16"):
        shuffle_weight(w, pad_k_to=16)
    with pytest.raises(ValueError, match="pad_k_to=0"):
        shuffle_weight(w, pad_k_to=0)


def test_unshuffle_crop_out_of_range():
    w = make_weight((16, 64), FP8)
    for k in (0, 65, -1):
        with pytest.raises(ValueError, match=f"k={k}"):
            unshuffle_weight(w, k=k)


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("fn", [shuffle_weight, unshuffle_weight])
def test_n_not_multiple_of_band(fn):
    w = make_weight((40, 64), FP8)
    with pytest.raises(ValueError) as err:
        fn(w, (16, 16), name="kv_b_proj")
    msg = str(err.value)
    assert msg.startswith("kv_b_proj:")
    assert "N=40" in msg and "multiple of 16" in msg and "shuffle_weight(16, 16)" in msg
    w = make_weight((48, 64), FP8)
    with pytest.raises(ValueError) as err:
        fn(w, (32, 16), name="wo_b")
    assert "N=48" in str(err.value) and "multiple of 32" in str(err.value)
    assert "shuffle_weight(32, 16)" in str(err.value)


@pytest.mark.parametrize("fn", [shuffle_weight, unshuffle_weight])
def test_k_not_multiple_of_32(fn):
    for dtype, k in [(FP8, 48), (torch.bfloat16, 16), (FP8, 8200)]:
        w = make_weight((16, k), dtype)
        with pytest.raises(ValueError) as err:
            fn(w, name="w_q")
        msg = str(err.value)
        assert f"K={k}" in msg and "multiple of 32" in msg and "shuffle_weight(16, 16)" in msg
        assert msg.startswith("w_q:")


@pytest.mark.parametrize("fn", [shuffle_weight, unshuffle_weight])
def test_one_dimensional_and_non_tensor(fn):
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        fn(torch.zeros(512, dtype=torch.uint8).view(FP8))
    with pytest.raises(TypeError, match="torch.Tensor"):
        fn(np.zeros((16, 32), dtype=np.uint8))


@pytest.mark.parametrize("fn", [shuffle_weight, unshuffle_weight])
def test_unknown_layout(fn):
    w = make_weight((32, 64), FP8)
    for layout in [(8, 8), (16, 32), (64, 16)]:
        with pytest.raises(ValueError) as err:
            fn(w, layout)
        assert str(tuple(layout)) in str(err.value)
        assert "(16, 16)" in str(err.value) and "(32, 16)" in str(err.value)


def test_eight_byte_elements_are_rejected():
    with pytest.raises(TypeError, match="8-byte"):
        shuffle_weight(torch.zeros(16, 32, dtype=torch.float64))
