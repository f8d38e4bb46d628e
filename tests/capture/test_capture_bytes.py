"""A captured tensor comes back exactly: dtype, shape, strides, storage offset and the bytes under every
element, for every dtype (fp8 formats included) and for strided and offset views, through memory and
through a rank folder on disk."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mla_debug.capture import CapturedTensor, CaptureManifest, EngineInfo, RankCapture, TensorRole
from mla_debug.capture.store import read_rank, write_rank
from mla_debug.capture.tensor_bytes import TensorLayout, layout_of, rebuild, spanned_bytes
from mla_debug.model import MLAConfig

DTYPES = [
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.float8_e4m3fn,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.bool,
]


def raw(t: torch.Tensor) -> torch.Tensor:
    """The element bytes in logical order (a dtype-independent equality)."""
    dense = torch.empty(t.shape, dtype=t.dtype).copy_(t).reshape(-1)
    return dense.view(torch.uint8) if t.dtype != torch.bool else dense.to(torch.uint8)


@st.composite
def views(draw):
    """A base buffer of random bytes and a view of it: a slice with steps, an offset, maybe transposed."""
    dtype = draw(st.sampled_from(DTYPES))
    rows, cols = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    seed = draw(st.integers(0, 2**31 - 1))
    item = torch.empty((), dtype=dtype).element_size()
    base_bytes = torch.randint(0, 256, (rows * cols * item,), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)
    if dtype == torch.bool:
        base_bytes = base_bytes % 2
    base = base_bytes.view(dtype).view(rows, cols)
    r0, c0 = draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1))
    r_step, c_step = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    view = base[r0::r_step, c0::c_step]
    if draw(st.booleans()):
        view = view.t()
    if draw(st.booleans()) and view.shape[0] > 1:
        view = view[1:]  # a storage offset that is not a whole row
    return view


@given(views())
@settings(max_examples=150, deadline=None)
def test_bytes_round_trip_keeps_layout_and_bytes(view):
    back = rebuild(spanned_bytes(view), layout_of(view), "test")
    assert back.dtype == view.dtype
    assert back.shape == view.shape
    assert back.stride() == view.stride()
    assert back.storage_offset() == view.storage_offset()
    assert torch.equal(raw(back), raw(view))


@given(views())
@settings(max_examples=80, deadline=None)
def test_owned_bytes_round_trip_the_same_and_only_unowned_ones_are_copied(view):
    layout = layout_of(view)
    owned = rebuild(spanned_bytes(view).clone(), layout, "test", owned=True)
    assert (owned.dtype, owned.shape, owned.stride(), owned.storage_offset()) == (
        view.dtype,
        view.shape,
        view.stride(),
        view.storage_offset(),
    )
    assert torch.equal(raw(owned), raw(view))
    given = spanned_bytes(view)  # a view of the original's storage: not handed over, so never aliased
    copied = rebuild(given, layout, "test")
    if view.numel():
        assert copied.untyped_storage().data_ptr() != view.untyped_storage().data_ptr()


def test_the_span_is_only_what_the_view_touches():
    base = torch.arange(100, dtype=torch.float32).view(10, 10)
    view = base[2:4, 3:5]  # offset 23, stride (10, 1): elements 23..34
    assert layout_of(view).span == 12
    assert spanned_bytes(view).numel() == 12 * 4
    assert layout_of(torch.empty(0, 5)).span == 0


def test_wrong_byte_counts_are_reported_as_corruption():
    view = torch.ones(3, 4)
    with pytest.raises(ValueError, match=r"48 bytes.*corrupt"):
        rebuild(torch.zeros(47, dtype=torch.uint8), layout_of(view), "w")
    with pytest.raises(ValueError, match="not a valid tensor layout"):
        TensorLayout.from_json({"dtype": "float32", "shape": [2], "stride": [1, 1], "storage_offset": 0}, "w")
    with pytest.raises(ValueError, match="unknown dtype 'float3'"):
        TensorLayout.from_json({"dtype": "float3", "shape": [2], "stride": [1], "storage_offset": 0}, "w")


@given(st.lists(views(), min_size=1, max_size=4))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_rank_folder_round_trips_every_tensor(tmp_path_factory, tensors):
    out = tmp_path_factory.mktemp("round-trip")
    manifest = CaptureManifest(EngineInfo("test"), MLAConfig.preset("tiny"), layer=0, tp_size=1, positions=(), tokens=())
    captured = {
        f"t{i}": CapturedTensor(f"t{i}", TensorRole.INPUT_SCALE, t, attrs={"k": i}) for i, t in enumerate(tensors)
    }
    folder = write_rank(out, manifest, RankCapture(0, 1, captured))
    _, rank = read_rank(folder)
    for name, original in captured.items():
        back = rank.tensors[name].tensor
        assert (back.dtype, back.shape, back.stride(), back.storage_offset()) == (
            original.tensor.dtype,
            original.tensor.shape,
            original.tensor.stride(),
            original.tensor.storage_offset(),
        )
        assert torch.equal(raw(back), raw(original.tensor))
        assert rank.tensors[name].attrs == original.attrs


def test_two_views_of_one_storage_are_both_kept(tmp_path):
    base = torch.arange(24, dtype=torch.float32).view(4, 6)
    halves = {"a": base[:, :3], "b": base[:, 3:].t()}
    manifest = CaptureManifest(EngineInfo("test"), MLAConfig.preset("tiny"), layer=0, tp_size=1, positions=(), tokens=())
    rank = RankCapture(0, 1, {n: CapturedTensor(n, TensorRole.OUTPUT, t) for n, t in halves.items()})
    _, back = read_rank(write_rank(tmp_path, manifest, rank))
    for name, view in halves.items():
        assert back.tensors[name].tensor.stride() == view.stride() and torch.equal(back.tensors[name].tensor, view)
