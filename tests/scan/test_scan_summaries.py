"""The scan's summary primitives, as properties: the sampled indices, and the checksum that tells equal
bytes from a relayout (two elements swapped) or a changed value."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.capture.scan import checksum, evenly_spaced, sample_columns


@given(total=st.integers(1, 5000), count=st.integers(1, 300))
def test_evenly_spaced_rows_are_distinct_sorted_in_range_with_the_last(total, count):
    rows = evenly_spaced(total, count)
    assert rows == sorted(set(rows)) and 0 <= rows[0] and rows[-1] == total - 1
    assert len(rows) == min(total, count)
    if count >= total:
        assert rows == list(range(total))
    elif count > 1:
        assert rows[0] == 0


@given(features=st.integers(1, 9000), count=st.integers(1, 512))
def test_sampled_columns_are_distinct_sorted_and_in_range(features, count):
    columns = sample_columns(features, count)
    assert columns == sorted(set(columns)) and columns[0] == 0 and columns[-1] < features
    assert len(columns) == min(features, count)


dtypes = st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.int8])


@settings(max_examples=60, deadline=None)
@given(dtype=dtypes, n=st.integers(2, 400), seed=st.integers(0, 2**16), data=st.data())
def test_the_checksum_tells_a_swap_or_a_changed_value_from_equal_bytes(dtype, n, seed, data):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g).mul(50).to(dtype)
    assert checksum(x) == checksum(x.clone()) == checksum(x.reshape(1, n).t().contiguous().reshape(n))
    i, j = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
    swapped = x.clone()
    swapped[i], swapped[j] = x[j], x[i]
    same_bytes = torch.equal(x[i : i + 1].view(torch.uint8), x[j : j + 1].view(torch.uint8))
    assert (checksum(swapped) == checksum(x)) == same_bytes
    changed = x.clone().view(torch.uint8)
    changed[i * x.element_size()] ^= 1  # one bit of one element
    assert checksum(changed.view(dtype)) != checksum(x)


def test_the_checksum_reads_a_strided_view_in_row_major_order():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert checksum(x.t()) == checksum(x.t().contiguous()) != checksum(x)
