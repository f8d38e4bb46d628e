"""A tensor's exact memory as bytes, and back: dtype, shape, strides and storage offset preserved.

A view (a transposed scale, a split of a fused output, a weight an engine re-strided) is kept as the
bytes it spans in its storage - from its first to its last element, gaps included - plus the layout that
reads them, so the rebuilt tensor has the same strides, the same storage offset and the same bytes
under every element. Bytes outside the span are not the tensor's and are not kept: the rebuilt storage
holds zeros before the offset. Bytes are handled as uint8 so every dtype round-trips, fp8 formats
included, whatever the file format supports.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# dtype <-> the name stored in a manifest (str(torch.float8_e4m3fn) is "torch.float8_e4m3fn").
DTYPE_PREFIX = "torch."


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix(DTYPE_PREFIX)


def dtype_from_name(name: str, where: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{where}: unknown dtype {name!r} (this torch {torch.__version__} has no torch.{name})")
    return dtype


@dataclass(frozen=True)
class TensorLayout:
    """How to read a tensor out of the bytes it spans: `span` elements starting at `storage_offset`."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int

    @property
    def span(self) -> int:
        """Elements from the first to the last one the view touches (0 for an empty tensor)."""
        if any(size == 0 for size in self.shape):
            return 0
        return 1 + sum((size - 1) * step for size, step in zip(self.shape, self.stride))

    @property
    def nbytes(self) -> int:
        return self.span * torch.empty((), dtype=self.dtype).element_size()

    def to_json(self) -> dict:
        return {
            "dtype": dtype_name(self.dtype),
            "shape": list(self.shape),
            "stride": list(self.stride),
            "storage_offset": self.storage_offset,
        }

    @classmethod
    def from_json(cls, data: dict, where: str) -> TensorLayout:
        try:
            shape, stride = tuple(int(x) for x in data["shape"]), tuple(int(x) for x in data["stride"])
            offset = int(data["storage_offset"])
            dtype = dtype_from_name(str(data["dtype"]), where)
        except (KeyError, TypeError, ValueError) as err:
            if isinstance(err, ValueError) and "unknown dtype" in str(err):
                raise
            raise ValueError(f"{where}: layout entry is malformed ({err!r}): {data}") from None
        if len(shape) != len(stride) or any(x < 0 for x in (*shape, *stride, offset)):
            raise ValueError(
                f"{where}: layout shape {shape} / stride {stride} / offset {offset} is not a valid tensor layout"
            )
        return cls(dtype, shape, stride, offset)


def layout_of(tensor: torch.Tensor) -> TensorLayout:
    return TensorLayout(tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset())


def _span(tensor: torch.Tensor) -> tuple[TensorLayout, torch.Tensor]:
    """The layout of `tensor` and the 1-D run of elements it spans (a view of the same storage)."""
    if tensor.layout != torch.strided:
        raise TypeError(f"only strided (dense) tensors can be kept byte for byte, got layout {tensor.layout}")
    layout = layout_of(tensor)
    if any(step < 0 for step in layout.stride):
        raise ValueError(f"tensor of shape {layout.shape} has a negative stride {layout.stride}")
    return layout, torch.as_strided(tensor.detach(), (layout.span,), (1,), layout.storage_offset)


def spanned_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes `tensor` spans in its storage, as a 1-D uint8 CPU tensor. For a CPU tensor this is a
    view of its storage, not a copy: take it when the bytes are about to be written, or copy it."""
    _, flat = _span(tensor)
    return flat.cpu().view(torch.uint8)


def exact_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy with the same dtype, shape, strides, storage offset and spanned bytes, made with one
    copy of the span (what a capture keeps of an engine tensor that may change after the call)."""
    layout, flat = _span(tensor)
    storage = torch.empty(layout.storage_offset + layout.span, dtype=layout.dtype)
    storage[: layout.storage_offset].view(torch.uint8).zero_()
    storage[layout.storage_offset :].copy_(flat)
    return torch.as_strided(storage, layout.shape, layout.stride, layout.storage_offset)


def rebuild(data: torch.Tensor, layout: TensorLayout, where: str, *, owned: bool = False) -> torch.Tensor:
    """The tensor `layout` reads from `data` (the bytes `spanned_bytes` returned), with the same strides
    and storage offset as the original. With `owned` (the caller hands over `data`, as a file reader
    does with the tensor it just read) a layout with no bytes before its span reads `data` in place;
    otherwise the result has its own storage."""
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise ValueError(f"{where}: stored bytes must be a 1-D uint8 tensor, got {data.dtype} of shape {tuple(data.shape)}")
    if data.numel() != layout.nbytes:
        raise ValueError(
            f"{where}: {data.numel()} stored bytes, but dtype {dtype_name(layout.dtype)} shape {layout.shape} "
            f"stride {layout.stride} spans {layout.nbytes} bytes (the file is corrupt or belongs to another manifest)"
        )
    item = torch.empty((), dtype=layout.dtype).element_size()
    if owned and layout.storage_offset == 0 and data.storage_offset() % item == 0 and data.is_contiguous():
        # Nothing precedes the span: the stored bytes are the storage, read in place (no zeroed buffer
        # and no second copy of a real-size weight).
        return torch.as_strided(data.view(layout.dtype), layout.shape, layout.stride, 0)
    storage = torch.zeros((layout.storage_offset + layout.span) * item, dtype=torch.uint8)
    storage[layout.storage_offset * item :] = data
    return torch.as_strided(storage.view(layout.dtype), layout.shape, layout.stride, layout.storage_offset)
