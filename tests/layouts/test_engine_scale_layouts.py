"""The engines' scale buffers: DeepGEMM's TMA-aligned column-major fp32 scales, four ue8m0 scales packed per
int32, and SGLang's ``as_strided(scale, shape, (1, M))`` re-layout - exact strides, exact bytes, exact round
trips (hypothesis). Expected bytes come from index loops here, never from the library's helpers; the
engines' own functions are compared in tests/engine_reference/test_kernel_layouts_vs_engines.py."""

from __future__ import annotations

import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts import (
    ScaleLayout,
    is_tma_aligned_column_major,
    pack_ue8m0,
    present_scale,
    read_scale,
    relay_column_major,
    tma_aligned_column_major,
    tma_aligned_size,
    unpack_ue8m0,
    values_relaid,
)

PROPS = settings(max_examples=60, deadline=None)
dims = st.integers(1, 24)
seeds = st.integers(0, 2**31 - 1)


def distinct(m: int, g: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return ((torch.randperm(m * g, generator=gen).float() + 1.0) / 8.0 + 0.001).reshape(m, g)


def powers_of_two(m: int, g: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.exp2(torch.randint(-126, 128, (m, g), generator=gen).float())


def storage_floats(t: torch.Tensor) -> list[float]:
    """The fp32 elements of t's whole storage, in memory order."""
    return torch.empty(0, dtype=torch.float32).set_(t.untyped_storage()).tolist()


@PROPS
@given(m=dims, g=dims, seed=seeds)
def test_tma_aligned_buffer_is_column_major_with_16_byte_columns(m, g, seed):
    logical = distinct(m, g, seed)
    buffer = tma_aligned_column_major(logical)
    padded = -(-m // 4) * 4
    assert tuple(buffer.shape) == (m, g) and buffer.stride() == (1, padded)
    assert tma_aligned_size(m, 4) == padded and is_tma_aligned_column_major(buffer)
    memory = storage_floats(buffer)
    assert len(memory) == g * padded
    for gi in range(g):
        for mi in range(padded):
            expected = float(logical[mi, gi]) if mi < m else 0.0
            assert memory[gi * padded + mi] == expected
    assert torch.equal(buffer, logical)  # read by its strides, it is the logical scale


@pytest.mark.parametrize(
    ("size", "element_size", "aligned"), [(1, 4, 4), (4, 4, 4), (5, 4, 8), (5, 1, 16), (17, 2, 24)]
)
def test_tma_alignment_is_16_bytes(size, element_size, aligned):
    assert tma_aligned_size(size, element_size) == aligned


def test_a_plain_column_major_buffer_is_tma_aligned_only_when_m_is_a_multiple_of_4():
    assert is_tma_aligned_column_major(present_scale(distinct(8, 3, 0), ScaleLayout.COL_MAJOR_STRIDED))
    assert not is_tma_aligned_column_major(present_scale(distinct(6, 3, 0), ScaleLayout.COL_MAJOR_STRIDED))
    assert not is_tma_aligned_column_major(present_scale(distinct(8, 3, 0), ScaleLayout.ROW_MAJOR))


@PROPS
@given(m=dims, g=dims, seed=seeds)
def test_ue8m0_packing_puts_four_exponent_bytes_per_int32_little_endian(m, g, seed):
    scales = powers_of_two(m, g, seed)
    packed = pack_ue8m0(scales)
    words, padded = -(-g // 4), -(-m // 4) * 4
    assert packed.dtype == torch.int32 and tuple(packed.shape) == (m, words) and packed.stride() == (1, padded)
    storage = torch.empty(0, dtype=torch.int32).set_(packed.untyped_storage()).tolist()
    for mi in range(m):
        for j in range(words):
            expected = bytes(
                (struct.unpack("<I", struct.pack("<f", float(scales[mi, 4 * j + b])))[0] >> 23) & 0xFF
                if 4 * j + b < g
                else 0
                for b in range(4)
            )
            assert struct.pack("<i", storage[j * padded + mi]) == expected
    assert torch.equal(unpack_ue8m0(packed, g), scales)


@PROPS
@given(m=dims, g=dims, seed=seeds)
def test_packing_keeps_only_the_exponent_so_other_scales_round_down_to_a_power_of_two(m, g, seed):
    scales = distinct(m, g, seed)
    read_back = unpack_ue8m0(pack_ue8m0(scales), g)
    mantissa, exponent = torch.frexp(scales)
    assert torch.equal(read_back, torch.ldexp(torch.full_like(scales, 0.5), exponent))
    assert bool((read_back <= scales).all()) and bool((read_back > scales / 2).all())


def test_unpack_checks_dtype_and_width():
    with pytest.raises(TypeError, match="must be int32"):
        unpack_ue8m0(torch.zeros(2, 1), 3)
    with pytest.raises(ValueError, match="holds 1 int32 per row, but 5 groups pack into 2"):
        unpack_ue8m0(torch.zeros(2, 1, dtype=torch.int32), 5)


@PROPS
@given(m=dims, g=dims, seed=seeds, layout=st.sampled_from(tuple(ScaleLayout)))
def test_sglang_relayout_reads_column_order_bytes_whatever_the_strides(m, g, seed, layout):
    logical = distinct(m, g, seed)
    buffer = present_scale(logical, layout)
    view = relay_column_major(buffer)
    assert tuple(view.shape) == (m, g) and view.stride() == (1, m)
    assert view.data_ptr() == buffer.data_ptr()  # no copy: the same bytes
    memory = storage_floats(buffer)
    for mi in range(m):
        for gi in range(g):
            assert float(view[mi, gi]) == memory[gi * m + mi]
    assert torch.equal(values_relaid(buffer), read_scale(buffer, ScaleLayout.COL_MAJOR))
    # Column-order bytes come out right; a ROW_MAJOR buffer comes out wrong exactly when the orders differ.
    right = torch.equal(view, logical)
    assert right == (layout.byte_order == "col" or m == 1 or g == 1)


def test_relayout_refuses_a_buffer_with_gaps():
    wide = torch.zeros(4, 10)
    with pytest.raises(ValueError, match="does not cover one gap-free span .* would read bytes outside it"):
        relay_column_major(wide[:, :3])
