"""VNNI packing (vLLM's CPU ``convert_weight_packed``) against an oracle written from its plain-words
definition, with property tests. The byte-for-byte check against the released op itself runs in the
engine tier (tests/engine/test_vnni_op.py), where vLLM's CPU build is installed.

"Rows in bands of 32 (the last may hold 16); inside a band of n rows, K in pairs; the band stored as
(K/2, n, 2): pair k of row r at (k, r)." The oracle below implements that sentence with index loops.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts.vnni import can_vnni_pack, vnni_pack, vnni_unpack

PROPS = settings(max_examples=40, deadline=None)
DTYPES = [torch.float8_e4m3fn, torch.bfloat16, torch.float16]


def distinct_weight(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random bytes, each element's index stamped in its low bytes where the element is wide enough."""
    gen = torch.Generator().manual_seed(seed)
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * size), dtype=torch.uint8, generator=gen)
    if size == 2:
        index = torch.arange(raw.numel() // 2, dtype=torch.int32)
        raw.view(-1, 2)[:, 0] = (index & 0xFF).to(torch.uint8)
    return raw.view(dtype)


def oracle_pack(w: torch.Tensor) -> np.ndarray:
    n, k = w.shape[-2], w.shape[-1]
    size = w.element_size()
    src = w.contiguous().view(torch.uint8).numpy().reshape(-1, n, k, size)
    out = np.empty_like(src)
    for batch in range(src.shape[0]):
        for start in range(0, n, 32):
            rows = min(32, n - start)
            flat = out[batch, start : start + rows].reshape(-1, size)  # the band's slots, in memory order
            for r in range(rows):
                for kk in range(k):
                    pair, lane = divmod(kk, 2)
                    flat[(pair * rows + r) * 2 + lane] = src[batch, start + r, kk]
            out[batch, start : start + rows] = flat.reshape(rows, k, size)
    return out.reshape(-1)


shapes = st.tuples(
    st.sampled_from([(), (2,), (3,)]), st.integers(1, 5).map(lambda b: 16 * b), st.integers(1, 4).map(lambda b: 32 * b)
)


@PROPS
@given(shapes, st.sampled_from(DTYPES), st.integers(0, 2**16))
def test_pack_matches_the_plain_words_definition(shape, dtype, seed):
    lead, n, k = shape
    w = distinct_weight((*lead, n, k), dtype, seed)
    packed = vnni_pack(w)
    assert packed.shape == w.shape and packed.dtype == w.dtype and packed.is_contiguous()
    assert np.array_equal(packed.view(torch.uint8).numpy().reshape(-1), oracle_pack(w))


@PROPS
@given(shapes, st.sampled_from(DTYPES), st.integers(0, 2**16))
def test_unpack_inverts_pack_and_pack_is_a_permutation(shape, dtype, seed):
    lead, n, k = shape
    w = distinct_weight((*lead, n, k), dtype, seed)
    packed = vnni_pack(w)
    assert torch.equal(vnni_unpack(packed).view(torch.uint8), w.view(torch.uint8))
    assert torch.equal(vnni_pack(vnni_unpack(w)).view(torch.uint8), w.view(torch.uint8))
    assert torch.equal(packed.view(torch.uint8).reshape(-1).sort().values, w.view(torch.uint8).reshape(-1).sort().values)


def test_pack_moves_bytes_whenever_a_band_has_more_than_one_row():
    w = distinct_weight((32, 64), torch.bfloat16)
    assert not torch.equal(vnni_pack(w).view(torch.int16), w.view(torch.int16))
    # Row 0's first pair stays, row 1's first pair moves next to it.
    assert torch.equal(vnni_pack(w).view(torch.int16)[0, 2:4], w.view(torch.int16)[1, 0:2])


def test_a_band_of_16_rows_at_the_end():
    w = distinct_weight((48, 32), torch.float8_e4m3fn)
    packed = vnni_pack(w).view(torch.uint8)
    # The last band (rows 32..47) is packed on its own: its first 32 bytes are rows 32..47's first pairs.
    assert torch.equal(packed[32].reshape(16, 2), w.view(torch.uint8)[32:48, 0:2])
    assert can_vnni_pack((48, 32), torch.float8_e4m3fn) and not can_vnni_pack((40, 32), torch.float8_e4m3fn)


@pytest.mark.parametrize(
    "shape, dtype, match",
    [
        ((40, 64), torch.bfloat16, r"weight: N=40 \(shape \(40, 64\).*multiple of 16"),
        ((32, 48), torch.float8_e4m3fn, r"weight: K=48 \(shape \(32, 48\).*multiple of 32"),
        ((64,), torch.bfloat16, r"at least 2 dimensions"),
    ],
)
def test_bad_shapes_are_named(shape, dtype, match):
    with pytest.raises(ValueError, match=match):
        vnni_pack(torch.zeros(shape, dtype=dtype))
    with pytest.raises(ValueError, match=match):
        vnni_unpack(torch.zeros(shape, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8])
def test_other_dtypes_are_refused(dtype):
    with pytest.raises(TypeError, match=r"q_b_proj.weight: shape \(32, 32\), dtype .* packs .*in pairs"):
        vnni_pack(torch.zeros(32, 32, dtype=dtype), name="q_b_proj.weight")
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        vnni_pack([[0.0]])


def test_forensics_recognise_a_vnni_packed_weight():
    from mla_debug.layouts import VerdictKind, compare_tensor, is_vnni_packing
    from mla_debug.viz.forensics import verdict_text

    w = distinct_weight((64, 128), torch.float8_e4m3fn)
    packed = vnni_pack(w)
    assert is_vnni_packing(packed, w) and not is_vnni_packing(w, w) and not is_vnni_packing(w, packed)
    verdict = compare_tensor("o_proj.weight", packed, w)
    assert verdict.kind is VerdictKind.VNNI_PACKED and verdict.shuffles is None
    assert "VNNI-packed" in verdict_text(verdict)
    assert compare_tensor("o_proj.weight", w, w).kind is VerdictKind.PLAIN
    assert compare_tensor("o_proj.weight", vnni_pack(packed), w).kind is VerdictKind.UNRELATED
