"""Scale-representation and grouped-order stories: candidate computations of one block-scaled GEMM whose
scales an engine held in some representation (`layouts.scale_format`).

A story here is a way a reader takes a scale's bytes for something else than they are. Each scale the
op used is held as fp32 values, as E8M0 codes (uint8 / float8_e8m0fnu) or as packed ue8m0 words (int32);
what it means is decided from the tensor itself, and the readings tried are:

- fp32 values: as they are (the intended read); cut to their exponent by a masked ue8m0 packer
  (`StoryKind.SCALE_TRUNCATED`, only where some value is not a power of two); packed by DeepGEMM's
  unmasked CUDA packer and read back (`StoryKind.UE8M0_MANTISSA_LEAK`, same condition). When the intended
  values are known (a weight's checkpoint scale) and the held fp32 numbers are exactly their E8M0 codes,
  the held numbers are the story `StoryKind.SCALE_CODES_AS_VALUES` and the checkpoint's values the
  intended read.
- E8M0 codes: as 2^(code - 127) (intended), or the code bytes as numbers (`SCALE_CODES_AS_VALUES`).
- packed words: unpacked (intended), or read as fp32 (`StoryKind.PACKED_SCALES_AS_VALUES`).
- a grouped GEMM's (T, G, k) activation scale written token-major: read token-major (intended) or
  group-major (`StoryKind.GROUPED_SCALE_TOKEN_READ_AS_GROUP`).

Every combination of one reading per operand is computed in fp32 from the fp8 codes (the torch
reference's arithmetic, rounded to the output dtype) and scored against the observed output with
`nan_aware_rel_err`: the unmasked packer and the packed-word misread give NaN, so a candidate must put
its non-finite values where the observed output has them and match the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import describe
from ..kernels.held_scales import block_gemm, dequantize_as_read
from ..layouts.scale_format import (
    as_codes,
    codes_read_as_values,
    e8m0_values,
    grouped_scale_read,
    is_power_of_two,
    pack_exponents,
    packed_words_read_as_scales,
    truncate_to_power_of_two,
    unpack_exponents,
)
from ..numerics import rel_l2
from ..numerics.quantize import group_quantize
from .stories import GROUP as _GROUP
from .stories import REQUANT_FLAVOR, LinearOperands, StoryKind

VALUES, CODES, PACKED = "fp32 values", "E8M0 codes", "packed ue8m0 words"
GROUP = 128
TOKEN_MAJOR, GROUP_MAJOR = "token-major", "group-major"


def representation(held: torch.Tensor) -> str:
    """What a held scale's bytes are, from its dtype: fp32 values, E8M0 codes or packed ue8m0 words."""
    if held.dtype == torch.float32:
        return VALUES
    if held.dtype == torch.int32:
        return PACKED
    as_codes(held, "held scale")  # refuses anything else, naming the dtypes it takes
    return CODES


@dataclass(frozen=True)
class ScaleReading:
    """One way of reading a held scale: the story it amounts to (None: the intended read) and the logical
    fp32 values the reader multiplies by."""

    kind: StoryKind | None
    values: torch.Tensor


def _codes_of(values: torch.Tensor) -> torch.Tensor | None:
    """The E8M0 codes of `values` as float numbers, when every value is a power of two; else None."""
    if not bool(is_power_of_two(values).all()):
        return None
    return ((values.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.float32)


def scale_readings(held: torch.Tensor, groups: int, intended: torch.Tensor | None = None) -> list[ScaleReading]:
    """Every reading of a held scale worth computing (see the module docstring); the intended read first.

    `groups` is the logical number of scale columns (a packed buffer holds a quarter as many words);
    `intended` the values the scale should hold when known (a weight's checkpoint block scale)."""
    rep = representation(held)
    if rep == CODES:
        return [
            ScaleReading(None, e8m0_values(held)),
            ScaleReading(StoryKind.SCALE_CODES_AS_VALUES, codes_read_as_values(held)),
        ]
    if rep == PACKED:
        return [
            ScaleReading(None, unpack_exponents(held, groups)),
            ScaleReading(StoryKind.PACKED_SCALES_AS_VALUES, packed_words_read_as_scales(held, groups)),
        ]
    values = held.to(torch.float32)
    if intended is not None and tuple(intended.shape) == tuple(held.shape) and not torch.equal(values, intended):
        codes = _codes_of(intended.to(torch.float32))
        if codes is not None and torch.equal(values, codes):
            return [
                ScaleReading(None, intended.to(torch.float32)),
                ScaleReading(StoryKind.SCALE_CODES_AS_VALUES, values),
            ]
    readings = [ScaleReading(None, values)]
    if not bool(is_power_of_two(values).all()) and bool((torch.isfinite(values) & (values > 0)).all()):
        flat = values.reshape(-1, values.shape[-1])
        leaked = unpack_exponents(pack_exponents(flat, masked=False), flat.shape[-1]).view(values.shape)
        readings += [
            ScaleReading(StoryKind.SCALE_TRUNCATED, truncate_to_power_of_two(values)),
            ScaleReading(StoryKind.UE8M0_MANTISSA_LEAK, leaked),
        ]
    return readings


def nan_aware_rel_err(candidate: torch.Tensor, observed: torch.Tensor) -> float:
    """Relative L2 error of `candidate` against `observed` over the entries both hold as finite numbers, or
    inf when they disagree on which entries are finite (a NaN / Inf the other does not have)."""
    cand, obs = candidate.to(torch.float64), observed.to(torch.float64)
    if cand.shape != obs.shape:
        raise ValueError(f"candidate {describe(candidate)} and observed {describe(observed)} differ in shape")
    finite_c, finite_o = torch.isfinite(cand), torch.isfinite(obs)
    if not torch.equal(finite_c, finite_o):
        return math.inf
    if not bool(finite_o.any()):
        return 0.0
    return rel_l2(cand[finite_o], obs[finite_o])


@dataclass(frozen=True)
class FormatOperands:
    """One rank's operands of a block-scaled GEMM as the engine held them.

    A plain linear: `x` (M, K) fp8 codes, `act_scale` (M, K/128) held, `weight` (N, K) fp8 codes,
    `weight_scale` (N/128, K/128) held. A grouped GEMM (``einsum("tgd,grd->tgr")``, DeepSeek-V4's wo_a):
    `x` (T, G, D), `act_scale` (T, G, D/128) held (a packed buffer flattened to (T * G, words)),
    `weight` (G, R, D), `weight_scale` (G, R/128, D/128) held. `weight_scale_intended` is the checkpoint's
    fp32 block scale when known; `act_rows_written` "token-major" marks a grouped activation scale
    quantized as ``(T * G, D)`` rows.
    """

    x: torch.Tensor
    act_scale: torch.Tensor
    weight: torch.Tensor
    weight_scale: torch.Tensor
    out_dtype: torch.dtype = torch.bfloat16
    weight_scale_intended: torch.Tensor | None = None
    act_rows_written: str | None = None

    @property
    def grouped(self) -> bool:
        return self.x.dim() == 3

    def __post_init__(self) -> None:
        for name in ("x", "weight"):
            t = getattr(self, name)
            if t.element_size() != 1 or not t.is_floating_point():
                raise TypeError(f"{name}: {describe(t)} must be fp8 codes (the op's quantized operand)")
        if self.grouped != (self.weight.dim() == 3):
            raise ValueError(
                f"x {describe(self.x)} and weight {describe(self.weight)}: both 2-D (a linear) or both 3-D (grouped)"
            )
        if self.x.shape[-1] % GROUP or self.x.shape[-1] != self.weight.shape[-1]:
            raise ValueError(
                f"x {describe(self.x)} and weight {describe(self.weight)} must share K, a multiple of {GROUP}"
            )


def _act_groups(ops: FormatOperands) -> int:
    return ops.x.shape[-1] // GROUP


def _act_readings(ops: FormatOperands) -> list[tuple[tuple[StoryKind, ...], torch.Tensor]]:
    """(kinds, logical scale values shaped like x's groups) for every reading of the activation scale."""
    lead = ops.x.shape[:-1]
    groups = _act_groups(ops)
    held = ops.act_scale
    rows = held.reshape(-1, held.shape[-1]) if held.dim() > 2 else held
    out = []
    for reading in scale_readings(rows, groups):
        values = reading.values.reshape(*lead, groups)
        kinds = () if reading.kind is None else (reading.kind,)
        out.append((kinds, values))
        if ops.grouped and ops.act_rows_written == TOKEN_MAJOR:
            out.append(
                (kinds + (StoryKind.GROUPED_SCALE_TOKEN_READ_AS_GROUP,), grouped_scale_read(values, GROUP_MAJOR))
            )
    return out


def _weight_readings(ops: FormatOperands) -> list[tuple[tuple[StoryKind, ...], torch.Tensor]]:
    held, intended = ops.weight_scale, ops.weight_scale_intended
    kb = ops.weight.shape[-1] // GROUP
    rows = held.reshape(-1, held.shape[-1]) if held.dim() > 2 else held
    intended_rows = None if intended is None else intended.reshape(-1, intended.shape[-1])
    shape = (*ops.weight.shape[:-2], -(-ops.weight.shape[-2] // GROUP), kb)
    return [
        (() if r.kind is None else (r.kind,), r.values.reshape(shape)) for r in scale_readings(rows, kb, intended_rows)
    ]


def compute(ops: FormatOperands, act: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """The op's output with the activation scale values `act` (x's groups) and block scale values
    `weight_scale` read (`kernels.held_scales.block_gemm`: fp32 products of the decoded codes, rounded once)."""
    return block_gemm(ops.x, act, ops.weight, weight_scale, ops.out_dtype)


def format_candidates(ops: FormatOperands) -> list[tuple[tuple[StoryKind, ...], torch.Tensor]]:
    """(kinds, output) of every combination of one activation-scale and one weight-scale reading; kinds ()
    is the intended computation. Each operand is dequantized once per reading."""
    acts = [(kinds, dequantize_as_read(ops.x, values, 1)) for kinds, values in _act_readings(ops)]
    found = []
    for w_kinds, w_scale in _weight_readings(ops):
        w = dequantize_as_read(ops.weight, w_scale, GROUP)
        for act_kinds, x in acts:
            out = torch.einsum("tgd,grd->tgr", x, w) if ops.grouped else x @ w.t()
            found.append((act_kinds + w_kinds, out.to(ops.out_dtype)))
    return found


_ACT_KINDS = (StoryKind.SCALE_TRUNCATED, StoryKind.UE8M0_MANTISSA_LEAK, StoryKind.PACKED_SCALES_AS_VALUES)


def linear_format_candidates(
    ops: LinearOperands, intended_weight_scale: torch.Tensor | None
) -> list[tuple[tuple[StoryKind, ...], torch.Tensor]]:
    """The representation stories of one captured linear step (`explain.explain_linear` adds them to
    its layout stories): its weight bytes must be the checkpoint's in plain order, quantized. An input
    captured unquantized is quantized here (`stories.REQUANT_FLAVOR`); its scale is then this
    module's own, so only the weight scale's stories are told. Returns (kinds, output) for every story
    (the intended computation left out: the layout stories already hold it)."""
    if not ops.quantized or ops.weight_scale is None or ops.weight.dim() != 2:
        return []
    fmt = ops.fmt
    captured_scale = ops.x.element_size() == 1
    if captured_scale:
        if ops.act_scale is None or ops.act_scale.dim() != 2 or ops.scale_rows is not None:
            return []
        codes, act = ops.x, ops.act_scale  # values by its strides; the byte-order stories read its bytes
    else:
        codes, act, _ = group_quantize(ops.x.to(torch.float32), _GROUP, fmt, REQUANT_FLAVOR, False, name="input")
    try:
        operands = FormatOperands(codes, act, ops.weight, ops.weight_scale, ops.out_dtype, intended_weight_scale)
    except (TypeError, ValueError):
        return []
    found = []
    for kinds, out in format_candidates(operands):
        if not kinds or (not captured_scale and any(k in _ACT_KINDS for k in kinds)):
            continue
        found.append((kinds, out))
    return found
