"""Quantized tensors as kernels receive them: fp8 bytes plus a scale in a concrete memory layout.

`quantize_groups` / `quantize_blocks` are the public quantizers: they run the math of
``mla_debug.numerics`` and present the result the way a given producer would write it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .._checks import describe, require_tensor
from ..numerics import Fp8Format, QuantFlavor, format_of, fp8_format, quant_flavor
from ..numerics.quantize import block_dequantize, block_quantize, group_dequantize, group_quantize
from .scale_layout import ScaleLayout, present_scale, read_scale
from .weight_layout import WeightLayout, WeightTransform
from .weight_shuffle import ShuffleLayout, shuffle_weight


def _checked_fp8(what: str, data: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format | str, dims: str) -> Fp8Format:
    """What a quantized activation and a quantized weight both hold to: 2-D fp8 bytes of `fmt` (`dims`
    names the axes) and an fp32 scale. Returns the format, parsed."""
    require_tensor(f"{what} data", data)
    require_tensor(f"{what} scale", scale)
    fmt = fp8_format(fmt)
    if format_of(data, f"{what} data") != fmt:
        raise TypeError(f"{what} data: dtype {data.dtype} does not match format {fmt.name}")
    if data.dim() != 2:
        raise ValueError(f"{what} data: {describe(data)} must be 2-D {dims}")
    if scale.dtype != torch.float32:
        raise TypeError(f"{what} scale: {describe(scale)} must be float32")
    return fmt


def _require_scale_shape(what: str, scale: torch.Tensor, expected: tuple[int, int], rule: str, of: str) -> None:
    """The scale's shape is `expected`, the `rule` (in words) applied to the data's shape (`of`)."""
    if tuple(scale.shape) != expected:
        raise ValueError(f"{what} scale: {describe(scale)} must have shape {rule} = {expected} for {of}")


@dataclass
class QuantizedActivation:
    """Per-1xgroup quantized activation (M, K).

    ``scale`` is the fp32 buffer exactly as a kernel would get it; ``scale_layout`` is what the producer
    wrote into it. A kernel may read the same bytes in another order - that is the silent bug.
    """

    data: torch.Tensor
    scale: torch.Tensor
    scale_layout: ScaleLayout
    fmt: Fp8Format
    group_size: int = 128
    producer: str = "quantize_groups"
    flavor: str = "aiter"
    ue8m0: bool = False
    overflow_count: int = 0

    def __post_init__(self) -> None:
        self.scale_layout = ScaleLayout.parse(self.scale_layout)
        self.fmt = _checked_fp8("activation", self.data, self.scale, self.fmt, "(M, K)")
        if self.group_size <= 0:
            raise ValueError(f"activation: group_size={self.group_size} must be positive")
        m, k = self.data.shape
        if k % self.group_size:
            raise ValueError(f"activation data: K={k} is not a multiple of group_size {self.group_size}")
        rule, of = f"(M, K/{self.group_size})", f"data {describe(self.data)}"
        _require_scale_shape("activation", self.scale, (m, k // self.group_size), rule, of)

    @property
    def m(self) -> int:
        return self.data.shape[0]

    @property
    def k(self) -> int:
        return self.data.shape[1]

    @property
    def groups(self) -> int:
        return self.k // self.group_size

    def logical_scale(self) -> torch.Tensor:
        """The (M, G) scale values, decoded with the layout the producer declared."""
        return read_scale(self.scale, self.scale_layout, f"{self.producer} scale")

    def dequantize(self) -> torch.Tensor:
        """fp32 (M, K) values as the producer meant them."""
        return group_dequantize(self.data, self.logical_scale(), self.group_size)

    def presented_as(self, layout: ScaleLayout | str, producer: str | None = None) -> QuantizedActivation:
        """The same quantized values with the scale rewritten (byte-exactly) in another layout."""
        layout = ScaleLayout.parse(layout)
        buffer = present_scale(self.logical_scale(), layout)
        return replace(self, scale=buffer, scale_layout=layout, producer=producer or self.producer)


@dataclass
class QuantizedWeight:
    """A 128x128 block-quantized weight: fp8 bytes as stored, block scale, and its layout history."""

    data: torch.Tensor
    scale: torch.Tensor
    fmt: Fp8Format
    layout: WeightLayout = field(default_factory=WeightLayout)
    block: tuple[int, int] = (128, 128)
    logical_k: int | None = None

    def __post_init__(self) -> None:
        self.fmt = _checked_fp8("weight", self.data, self.scale, self.fmt, "(N, K)")
        n, k = self.n, self.k
        bn, bk = self.block
        rule, of = f"(ceil(N/{bn}), ceil(K/{bk}))", f"weight (N, K) = ({n}, {k})"
        _require_scale_shape("weight", self.scale, (-(-n // bn), -(-k // bk)), rule, of)

    @property
    def n(self) -> int:
        return self.data.shape[0]

    @property
    def k(self) -> int:
        """Logical K (before any K padding a shuffle added)."""
        return self.logical_k if self.logical_k is not None else self.data.shape[1]

    def shuffled(self, layout: ShuffleLayout = (16, 16), by: str = "user", pad_k_to: int | None = None):
        """A copy whose bytes are shuffled once more, with the transform recorded."""
        data = shuffle_weight(self.data, layout, pad_k_to=pad_k_to, name=f"weight shuffled by {by}")
        history = self.layout
        if pad_k_to is not None and data.shape[1] != self.data.shape[1]:
            history = history.then(WeightTransform("pad_k", by=by, pad_k_to=pad_k_to))
        return replace(
            self,
            data=data,
            layout=history.then(WeightTransform("shuffle", by=by, layout=tuple(layout))),
            logical_k=self.k,
        )

    def dequantize_plain(self) -> torch.Tensor:
        """fp32 values of the bytes read as a plain (N, K) matrix - right only when the layout is plain."""
        if self.data.shape[1] != self.k:
            raise ValueError(f"weight: bytes are K-padded to {self.data.shape[1]}; read them through a shuffled reader")
        return block_dequantize(self.data, self.scale, self.block)


def quantize_groups(
    x: torch.Tensor,
    group_size: int = 128,
    fmt: Fp8Format | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    scale_layout: ScaleLayout | str = ScaleLayout.ROW_MAJOR,
    ue8m0: bool = False,
    producer: str = "quantize_groups",
) -> QuantizedActivation:
    """Quantize activations (M, K) per 1 x `group_size` group; the scale is written in `scale_layout`.

    A flavor naming an engine function that runs another kernel for the other scale order (SGLang's
    ``sglang-triton`` / ``sglang-triton-colmajor``) quantizes with the kernel for `scale_layout`'s byte
    order, as the engine does (`QuantFlavor.for_scale_order`); the result records the flavor that ran.

    >>> qa = md.quantize_groups(torch.randn(4, 256), scale_layout=md.ScaleLayout.COL_MAJOR)
    """
    scale_layout = ScaleLayout.parse(scale_layout)
    fmt, flavor = fp8_format(fmt), quant_flavor(flavor)
    flavor = quant_flavor(flavor.for_scale_order(scale_layout.byte_order))
    require_tensor("x", x)
    if x.dim() != 2:
        raise ValueError(f"x: {describe(x)} must be 2-D (M, K); flatten leading token dims first")
    q, scale, overflows = group_quantize(x, group_size, fmt, flavor, ue8m0, name="x")
    return QuantizedActivation(
        data=q,
        scale=present_scale(scale, scale_layout),
        scale_layout=ScaleLayout.parse(scale_layout),
        fmt=fmt,
        group_size=group_size,
        producer=producer,
        flavor=flavor.name,
        ue8m0=ue8m0,
        overflow_count=overflows,
    )


def quantize_blocks(
    w: torch.Tensor,
    block: tuple[int, int] = (128, 128),
    fmt: Fp8Format | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    ue8m0: bool = False,
) -> QuantizedWeight:
    """Quantize a weight (N, K) per `block`; the result is plain (unshuffled)."""
    fmt, flavor = fp8_format(fmt), quant_flavor(flavor)
    q, scale, _ = block_quantize(w, block, fmt, flavor, ue8m0, name="w")
    return QuantizedWeight(data=q, scale=scale, fmt=fmt, block=tuple(block))
