"""Activation-scale presentations (docs/semantics.md §5): exact bytes, exact strides, exact round trips.

Every expected byte order here is computed by explicit index loops in the test, never through the
library's own helpers, so a wrong formula in the library cannot also be the oracle.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts import (
    ScaleLayout,
    convert_scale,
    present_scale,
    read_scale,
    same_bytes,
    scale_as_read,
    scale_memory,
)

ALL = tuple(ScaleLayout)
PAIRS = list(itertools.product(ALL, ALL))
dims = st.integers(1, 40)
layouts = st.sampled_from(ALL)
seeds = st.integers(0, 2**31 - 1)
PROPS = settings(max_examples=60, deadline=None)


def distinct_scale(m: int, g: int, seed: int = 0) -> torch.Tensor:
    """(M, G) fp32 with pairwise distinct, non-integer values (a permutation of arange, shifted)."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(m * g, generator=gen).to(torch.float32)
    return ((perm + 1.0) / 8.0 + 0.001).reshape(m, g)


def raw_memory(t: torch.Tensor) -> torch.Tensor:
    """The bytes t spans from its data pointer, read straight from its storage (uint8, 1-D)."""
    storage = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
    start = t.storage_offset() * t.element_size()
    return storage[start : start + t.numel() * t.element_size()].clone()


def expected_memory(logical: torch.Tensor, order: str) -> torch.Tensor:
    """Bytes of the logical scale written row by row ('row': m*G + g) or column by column ('col': g*M + m)."""
    m, g = logical.shape
    values = logical.tolist()
    if order == "row":
        flat = [values[i][j] for i in range(m) for j in range(g)]
    else:
        flat = [values[i][j] for j in range(g) for i in range(m)]
    return torch.tensor(flat, dtype=torch.float32).view(torch.uint8)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    # reshape(-1), not contiguous(): torch calls an (M, 1) tensor with strides (1, M) contiguous, yet
    # refuses to reinterpret it as bytes.
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


EXPECTED_STRIDES = {
    ScaleLayout.ROW_MAJOR: lambda m, g: (g, 1),
    ScaleLayout.COL_MAJOR: lambda m, g: (g, 1),
    ScaleLayout.COL_MAJOR_STRIDED: lambda m, g: (1, m),
}
EXPECTED_ORDER = {ScaleLayout.ROW_MAJOR: "row", ScaleLayout.COL_MAJOR: "col", ScaleLayout.COL_MAJOR_STRIDED: "col"}


# --------------------------------------------------------------------------------------------- present


@PROPS
@given(m=dims, g=dims, layout=layouts, seed=seeds)
def test_present_scale_exact_bytes_strides_and_fresh_buffer(m, g, layout, seed):
    logical = distinct_scale(m, g, seed)
    before = logical.clone()
    buf = present_scale(logical, layout)

    assert tuple(buf.shape) == (m, g)
    assert buf.dtype == torch.float32
    assert tuple(buf.stride()) == EXPECTED_STRIDES[layout](m, g)
    assert tuple(buf.stride()) == layout.strides(m, g)
    # A fresh buffer holding exactly M*G floats, nothing else, in the layout's byte order.
    assert buf.untyped_storage().nbytes() == m * g * 4
    assert buf.untyped_storage().data_ptr() != logical.untyped_storage().data_ptr()
    assert torch.equal(raw_memory(buf), expected_memory(logical, EXPECTED_ORDER[layout]))
    # Writing into the buffer must not touch the logical scale (no aliasing, also for M == 1 / G == 1).
    buf.fill_(-7.0)
    assert bitwise_equal(logical, before)


@pytest.mark.parametrize("layout", ALL)
def test_present_scale_does_not_alias_for_degenerate_shapes(layout):
    # `.contiguous()` is a no-op on a (1, G) transpose; the buffer must still be a copy.
    for m, g in [(1, 7), (7, 1), (1, 1)]:
        logical = distinct_scale(m, g)
        buf = present_scale(logical, layout)
        assert not buf.untyped_storage().data_ptr() == logical.untyped_storage().data_ptr()
        assert tuple(buf.stride()) == EXPECTED_STRIDES[layout](m, g)


@PROPS
@given(m=dims, g=dims, layout=layouts, seed=seeds)
def test_present_scale_of_non_contiguous_logical(m, g, layout, seed):
    # The logical values may come as any view (here a transpose); only their values matter.
    logical = distinct_scale(g, m, seed).t()
    buf = present_scale(logical, layout)
    assert tuple(buf.stride()) == EXPECTED_STRIDES[layout](m, g)
    assert torch.equal(raw_memory(buf), expected_memory(logical.contiguous(), EXPECTED_ORDER[layout]))


@pytest.mark.parametrize("m,g", [(3, 5), (8, 2), (2, 8)])
def test_row_major_and_col_major_look_identical_but_hold_different_bytes(m, g):
    logical = distinct_scale(m, g)
    row = present_scale(logical, ScaleLayout.ROW_MAJOR)
    col = present_scale(logical, ScaleLayout.COL_MAJOR)
    # The silent bug: nothing a consumer can inspect tells them apart ...
    assert row.shape == col.shape and row.stride() == col.stride() and row.dtype == col.dtype
    assert row.is_contiguous() and col.is_contiguous()
    # ... but the bytes differ.
    assert not torch.equal(raw_memory(row), raw_memory(col))
    strided = present_scale(logical, ScaleLayout.COL_MAJOR_STRIDED)
    assert torch.equal(raw_memory(strided), raw_memory(col))
    assert tuple(strided.stride()) == (1, m)
    # A strided buffer's tensor values are the logical ones; a "view" buffer's are not.
    assert bitwise_equal(strided, logical)
    assert not bitwise_equal(col, logical)


# ------------------------------------------------------------------------------------------ read / convert


@PROPS
@given(m=dims, g=dims, layout=layouts, seed=seeds)
def test_read_scale_inverts_present_scale(m, g, layout, seed):
    logical = distinct_scale(m, g, seed)
    buf = present_scale(logical, layout)
    back = read_scale(buf, layout)
    assert tuple(back.shape) == (m, g)
    assert bitwise_equal(back, logical)


@PROPS
@given(m=dims, g=dims, src=layouts, dst=layouts, seed=seeds)
def test_convert_scale_all_pairs_exact(m, g, src, dst, seed):
    logical = distinct_scale(m, g, seed)
    buf = present_scale(logical, src)
    src_bytes = raw_memory(buf)
    out = convert_scale(buf, src, dst)

    assert tuple(out.shape) == (m, g)
    assert tuple(out.stride()) == EXPECTED_STRIDES[dst](m, g)
    assert torch.equal(raw_memory(out), expected_memory(logical, EXPECTED_ORDER[dst]))
    assert bitwise_equal(read_scale(out, dst), logical)
    # The source buffer is untouched and not shared with the result.
    assert torch.equal(raw_memory(buf), src_bytes)
    assert out.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr()
    # And converting back restores the source bytes exactly.
    again = convert_scale(out, dst, src)
    assert torch.equal(raw_memory(again), src_bytes)
    assert tuple(again.stride()) == EXPECTED_STRIDES[src](m, g)


@PROPS
@given(m=dims, g=dims, layout=layouts, seed=seeds)
def test_read_scale_follows_bytes_not_strides(m, g, layout, seed):
    # A raw-pointer reader takes M*G consecutive floats whatever the tensor claims.
    logical = distinct_scale(m, g, seed)
    buf = present_scale(logical, layout)
    flat = raw_memory(buf).view(torch.float32).tolist()
    for read_as in ALL:
        got = read_scale(buf, read_as).tolist()
        for i in range(m):
            for j in range(g):
                index = i * g + j if read_as is ScaleLayout.ROW_MAJOR else j * m + i
                assert got[i][j] == flat[index]


def test_read_scale_honours_storage_offset():
    m, g = 3, 4
    big = torch.arange(2 * m * g, dtype=torch.float32).reshape(2 * m, g)
    buf = big[m:]  # dense, but starts in the middle of its storage
    assert buf.storage_offset() == m * g
    assert bitwise_equal(read_scale(buf, ScaleLayout.ROW_MAJOR), big[m:])
    col = read_scale(buf, ScaleLayout.COL_MAJOR)
    flat = list(range(m * g, 2 * m * g))
    assert col.tolist() == [[float(flat[j * m + i]) for j in range(g)] for i in range(m)]
    assert torch.equal(scale_memory(buf), torch.arange(m * g, 2 * m * g, dtype=torch.float32))


# ------------------------------------------------------------------------------------- scale_as_read


@PROPS
@given(m=dims, g=dims, written=layouts, read_as=layouts, seed=seeds)
def test_scale_as_read_equal_exactly_when_bytes_agree(m, g, written, read_as, seed):
    logical = distinct_scale(m, g, seed)
    got = scale_as_read(logical, written=written, read_as=read_as)
    harmless = written.byte_order == read_as.byte_order or m == 1 or g == 1
    # Values are pairwise distinct, so any real permutation must show.
    assert bitwise_equal(got, logical) == harmless
    assert same_bytes(written, read_as, m, g) == harmless
    assert same_bytes(written.value, read_as.name, m, g) == harmless
    # The result is a copy: it never aliases the logical scale.
    assert got.untyped_storage().data_ptr() != logical.untyped_storage().data_ptr()


@PROPS
@given(m=dims, g=dims, seed=seeds)
def test_row_written_col_read_index_oracle(m, g, seed):
    logical = distinct_scale(m, g, seed)
    vals = logical.tolist()
    flat_row = [vals[i][j] for i in range(m) for j in range(g)]  # byte m*G + g holds (m, g)
    expected = [[flat_row[j * m + i] for j in range(g)] for i in range(m)]
    for read_as in (ScaleLayout.COL_MAJOR, ScaleLayout.COL_MAJOR_STRIDED):
        got = scale_as_read(logical, written=ScaleLayout.ROW_MAJOR, read_as=read_as)
        assert bitwise_equal(got, torch.tensor(expected, dtype=torch.float32))


@PROPS
@given(m=dims, g=dims, seed=seeds)
def test_col_written_row_read_index_oracle(m, g, seed):
    logical = distinct_scale(m, g, seed)
    vals = logical.tolist()
    flat_col = [vals[i][j] for j in range(g) for i in range(m)]  # byte g*M + m holds (m, g)
    expected = [[flat_col[i * g + j] for j in range(g)] for i in range(m)]
    for written in (ScaleLayout.COL_MAJOR, ScaleLayout.COL_MAJOR_STRIDED):
        got = scale_as_read(logical, written=written, read_as=ScaleLayout.ROW_MAJOR)
        assert bitwise_equal(got, torch.tensor(expected, dtype=torch.float32))


def test_scale_as_read_concrete_example():
    # 2 tokens x 3 groups: the row-major bytes are [a0 a1 a2 b0 b1 b2]; a col-major reader takes
    # (m, g) from offset g*2 + m, so token 0 gets [a0 a2 b1] and token 1 gets [a1 b0 b2].
    logical = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    got = scale_as_read(logical, "row_major", "col_major")
    assert got.tolist() == [[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]
    assert scale_as_read(logical, "col_major", "col_major_strided").tolist() == logical.tolist()


def test_same_bytes_table():
    R, C, S = ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR, ScaleLayout.COL_MAJOR_STRIDED
    assert same_bytes(R, R, 4, 4) and same_bytes(C, S, 4, 4) and same_bytes(S, C, 4, 4)
    assert not same_bytes(R, C, 2, 2) and not same_bytes(S, R, 2, 2)
    assert same_bytes(R, C, 1, 56) and same_bytes(C, R, 56, 1)
    assert R.byte_order == "row" and C.byte_order == "col" and S.byte_order == "col"


# ----------------------------------------------------------------------------------------- bad input


def test_unknown_layout_lists_valid_names():
    with pytest.raises(ValueError) as err:
        ScaleLayout.parse("diagonal")
    msg = str(err.value)
    assert "'diagonal'" in msg
    for name in ("ROW_MAJOR", "COL_MAJOR", "COL_MAJOR_STRIDED"):
        assert name in msg
    with pytest.raises(ValueError, match="ROW_MAJOR"):
        present_scale(torch.ones(2, 2), "transposed")
    with pytest.raises(ValueError, match="COL_MAJOR_STRIDED"):
        read_scale(torch.ones(2, 2), "colmajor")


def test_parse_accepts_names_values_and_dashes():
    assert ScaleLayout.parse("col-major-strided") is ScaleLayout.COL_MAJOR_STRIDED
    assert ScaleLayout.parse(" ROW_MAJOR ") is ScaleLayout.ROW_MAJOR
    assert ScaleLayout.parse("col_major") is ScaleLayout.COL_MAJOR
    assert ScaleLayout.parse(ScaleLayout.COL_MAJOR) is ScaleLayout.COL_MAJOR
    assert str(ScaleLayout.COL_MAJOR) == "COL_MAJOR"


@pytest.mark.parametrize(
    "make",
    [
        lambda: present_scale(torch.arange(24.0).reshape(4, 6), "row_major")[:, :5],  # column slice
        lambda: present_scale(torch.arange(24.0).reshape(4, 6), "row_major")[::2],  # every other row
        lambda: present_scale(torch.arange(24.0).reshape(4, 6), "col_major_strided")[:3],  # strided rows
    ],
)
def test_non_dense_buffer_is_rejected(make):
    buf = make()
    for layout in ALL:
        with pytest.raises(ValueError, match="gap-free"):
            read_scale(buf, layout, name="x_scale")
    with pytest.raises(ValueError, match="x_scale"):
        read_scale(buf, "row_major", name="x_scale")
    with pytest.raises(ValueError):
        scale_memory(buf)
    with pytest.raises(ValueError):
        convert_scale(buf, "row_major", "col_major")


def test_wrong_rank_and_non_tensor_inputs():
    with pytest.raises(ValueError, match="2-D"):
        present_scale(torch.ones(6), "row_major", name="x_scale")
    with pytest.raises(ValueError, match="2-D"):
        read_scale(torch.ones(2, 3, 4), "col_major", name="x_scale")
    with pytest.raises(TypeError, match="x_scale"):
        present_scale([[1.0]], "row_major", name="x_scale")
    with pytest.raises(TypeError, match="x_scale"):
        read_scale([[1.0]], "row_major", name="x_scale")
    with pytest.raises(TypeError):
        scale_memory(3.0)
