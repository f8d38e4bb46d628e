"""Our weight shuffle and its inverse against aiter's ``shuffle_weight`` (aiter/ops/shuffle.py), byte for byte.

Every element type the layers meet (fp8 in both formats, bf16, int8, fp16), both layouts, batch dims.
"""

from __future__ import annotations

import pytest
import torch
from aiter_ref import assert_same_bits, require_aiter
from hypothesis import given, settings
from hypothesis import strategies as st

import mla_debug as md
from mla_debug.real_aiter import functions

DTYPES = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.bfloat16, torch.int8, torch.float16]


def random_weight(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Every bit pattern equally likely (NaN encodings included): a shuffle moves bytes, never reads them."""
    gen = torch.Generator().manual_seed(seed)
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * size), generator=gen, dtype=torch.uint8)
    return raw.view(dtype)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    layout=st.sampled_from([(16, 16), (32, 16)]),
    bands=st.integers(1, 4),
    k_blocks=st.integers(1, 12),
    batch=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    seed=st.integers(0, 2**31 - 1),
)
def test_shuffle_and_unshuffle_match_aiter(dtype, layout, bands, k_blocks, batch, seed):
    require_aiter()
    aiter_shuffle = functions.shuffle_weight()
    n, k = bands * layout[0], k_blocks * 2 * layout[1]
    w = random_weight((*batch, n, k), dtype, seed)
    theirs = aiter_shuffle(w.clone(), layout=layout)
    assert getattr(theirs, "is_shuffled", False)  # aiter tags its result (lost on clone; docs/semantics.md §6)
    ours = md.shuffle_weight(w, layout)
    assert_same_bits(ours, theirs, f"shuffle_weight{layout} of {tuple(w.shape)} {dtype}")
    assert_same_bits(md.layouts.unshuffle_weight(theirs, layout), w, f"unshuffle of aiter's shuffle{layout}")


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
def test_double_shuffle_at_256_byte_rows_is_aiter_identity_too(dtype):
    """The involution the double-shuffle defect hides behind holds for aiter's own function."""
    require_aiter()
    aiter_shuffle = functions.shuffle_weight()
    k = 256 // torch.empty((), dtype=dtype).element_size()
    w = random_weight((48, k), dtype, seed=7)
    twice = aiter_shuffle(aiter_shuffle(w))
    assert_same_bits(twice, w, "aiter shuffle applied twice to 256-byte rows")
    assert md.layouts.shuffle_period(k, w.element_size()) == 2
