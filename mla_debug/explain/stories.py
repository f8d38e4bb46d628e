"""The layout stories mla_debug knows, as candidate computations of one captured op.

A story is a way an engine can read the bytes it holds in another order than they were written. For a
linear step, every candidate recomputes the step's output from the captured input with the weight
and scales read one way (`Reading`); the story's kinds say which reads are wrong and why
(`StoryKind`, each tied to the `layouts.contracts.ViolationKind` it breaks):

- the weight: the checkpoint's values (the correct read), or the captured bytes read plainly or
  un-shuffled once by a preshuffle-aware reader (`layouts.unshuffle_weight`), judged against how many
  (16, 16) shuffles turn the checkpoint's bytes into the captured ones (`layouts.forensics`), or
  un-packed from VNNI by a VNNI-aware reader (`layouts.vnni`: vLLM's CPU kernels), judged against whether
  the captured bytes are the checkpoint's VNNI-packed;
- its block scale: read in the byte order it holds, or in the other one (`layouts.read_scale`);
- the activation scale: read in the byte order its producer wrote, or in the other one
  (`layouts.read_scale`: a raw-pointer reader; a stride-following reader reads the order the strides
  claim, which is one of the two);
- a derived weight (W_UK, W_UV): derived from the checkpoint's values, or from the captured kv_b_proj
  bytes read directly (`model.absorbed` layout: per head P nope rows then V rows of Lkv columns), or -
  where the engine released kv_b_proj after deriving (vLLM CPU's AMX_MLA) - from the checkpoint's bytes
  VNNI-packed and read directly.

The arithmetic is the torch reference's (`numerics.block_dequantize`, fp32 GEMM, the output's dtype);
activations given unquantized are quantized per 1x128 group (`numerics.quantize.group_quantize`) with
the captured scale's values where the op exposed them - except for a W8A16 kernel (vLLM CPU's
`CPUFp8BlockScaledMMKernel`), which multiplies the unquantized input with its own FP8 decode
(`kernels.vllm_cpu`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum

import torch

from ..kernels.vllm_cpu import w8a16_decode
from ..layouts import ScaleLayout, ViolationKind, can_vnni_pack, read_scale, unshuffle_weight
from ..layouts import vnni_unpack as vnni_unpack_weight
from ..numerics import fp8_format, quant_flavor, rel_l2
from ..numerics.quantize import block_dequantize, group_quantize

SHUFFLE = (16, 16)
GROUP = 128
# The activation-scale flavor used to re-quantize an unquantized captured input when the op did not
# expose its scale: the serving default of the aiter kernels (only the noise of the recomputation depends on it).
REQUANT_FLAVOR = "aiter-hip"


class StoryKind(str, Enum):
    """One way of reading an operand that a known layout bug produces (CORRECT: the intended read)."""

    CORRECT = "correct"
    WEIGHT_RELAID_READ_PLAIN = "weight-relaid-read-plain"  # bytes shuffled >= 1 time, read as a plain matrix
    WEIGHT_SHUFFLED_TWICE = "weight-shuffled-twice"  # bytes shuffled twice, the preshuffle-aware reader undoes one
    WEIGHT_PLAIN_READ_AS_SHUFFLED = "weight-plain-read-as-shuffled"  # plain bytes un-shuffled by a preshuffle reader
    ACT_SCALE_ROW_READ_AS_COL = "act-scale-row-major-read-column-major"
    ACT_SCALE_COL_READ_AS_ROW = "act-scale-column-major-read-row-major"
    WEIGHT_SCALE_OTHER_ORDER = "weight-scale-read-in-another-order"
    DERIVED_FROM_RELAID = "derived-weight-from-relaid-bytes"
    # Scale representation and grouped order (computed in `capture_format_stories`).
    SCALE_CODES_AS_VALUES = "scale-codes-read-as-values"
    PACKED_SCALES_AS_VALUES = "packed-scales-read-as-values"
    SCALE_TRUNCATED = "scale-truncated-to-power-of-two"
    UE8M0_MANTISSA_LEAK = "ue8m0-packing-mantissa-leak"
    GROUPED_SCALE_TOKEN_READ_AS_GROUP = "grouped-scale-token-major-read-group-major"
    # vLLM's CPU kernels (`layouts.vnni`): a weight held VNNI-packed read as a plain matrix, and a plain
    # weight un-packed by a VNNI-aware reader.
    WEIGHT_VNNI_READ_PLAIN = "weight-vnni-packed-read-plain"
    WEIGHT_PLAIN_READ_AS_VNNI = "weight-plain-read-as-vnni-packed"

    @property
    def violation(self) -> ViolationKind | None:
        """The layout contract this story breaks (None for CORRECT)."""
        return STORY_VIOLATIONS.get(self)


STORY_VIOLATIONS = {
    StoryKind.WEIGHT_RELAID_READ_PLAIN: ViolationKind.RELAID_WEIGHT_DIRECT_READ,
    StoryKind.WEIGHT_SHUFFLED_TWICE: ViolationKind.DOUBLE_SHUFFLE,
    StoryKind.WEIGHT_PLAIN_READ_AS_SHUFFLED: ViolationKind.WEIGHT_LAYOUT_MISMATCH,
    StoryKind.ACT_SCALE_ROW_READ_AS_COL: ViolationKind.SCALE_ORDER,
    StoryKind.ACT_SCALE_COL_READ_AS_ROW: ViolationKind.SCALE_ORDER,
    StoryKind.WEIGHT_SCALE_OTHER_ORDER: ViolationKind.WEIGHT_LAYOUT_MISMATCH,
    StoryKind.DERIVED_FROM_RELAID: ViolationKind.RELAID_WEIGHT_DIRECT_READ,
    StoryKind.SCALE_CODES_AS_VALUES: ViolationKind.SCALE_CODES_AS_VALUES,
    StoryKind.PACKED_SCALES_AS_VALUES: ViolationKind.PACKED_SCALES_AS_VALUES,
    StoryKind.SCALE_TRUNCATED: ViolationKind.SCALE_TRUNCATED,
    StoryKind.UE8M0_MANTISSA_LEAK: ViolationKind.UE8M0_MANTISSA_LEAK,
    StoryKind.GROUPED_SCALE_TOKEN_READ_AS_GROUP: ViolationKind.GROUPED_SCALE_ORDER,
    StoryKind.WEIGHT_VNNI_READ_PLAIN: ViolationKind.RELAID_WEIGHT_DIRECT_READ,
    StoryKind.WEIGHT_PLAIN_READ_AS_VNNI: ViolationKind.WEIGHT_LAYOUT_MISMATCH,
}


@dataclass(frozen=True)
class Reading:
    """How a candidate reads a linear's operands: the weight bytes un-shuffled `weight_unshuffles`
    times (None: the checkpoint's values), the weight scale and the activation scale in a byte order
    (None: no such operand, or read as held/written). `weight_vnni_unpack`: the reader un-packs the bytes
    from VNNI (a VNNI-aware reader) before taking them as a matrix."""

    weight_unshuffles: int | None = None
    weight_scale: ScaleLayout | None = None
    act_scale: ScaleLayout | None = None
    weight_vnni_unpack: bool = False


@dataclass(frozen=True)
class Held:
    """What one rank holds, by forensics against the checkpoint: shuffles of the weight bytes (None:
    other values), the period of the shuffle at this row width, shuffle counts with the same bytes,
    the byte order of the block scale (None: other values or none) and of the activation scale as written.
    `vnni`: the weight bytes are the checkpoint's VNNI-packed (then `shuffles` is None)."""

    shuffles: int | None
    period: int = 1
    same_bytes_as: tuple[int, ...] = ()
    weight_scale: ScaleLayout | None = ScaleLayout.ROW_MAJOR
    act_scale_written: ScaleLayout | None = None
    vnni: bool = False

    @property
    def checkpoint_bytes(self) -> bool:
        """Whether the held weight bytes are the checkpoint's in some known layout."""
        return self.shuffles is not None or self.vnni


def reading_kinds(reading: Reading, held: Held) -> tuple[StoryKind, ...]:
    """The story kinds a reading amounts to, given what the rank holds; () for the correct read."""
    kinds = []
    r, h = reading.weight_unshuffles, held.shuffles
    if r is not None and held.vnni and not reading.weight_vnni_unpack:
        kinds.append(StoryKind.WEIGHT_VNNI_READ_PLAIN)
    elif r is not None and not held.vnni and reading.weight_vnni_unpack:
        kinds.append(StoryKind.WEIGHT_PLAIN_READ_AS_VNNI)
    if r is not None and h is not None and (h - r) % max(held.period, 1):
        if r == 0:
            kinds.append(StoryKind.WEIGHT_RELAID_READ_PLAIN)
        elif h == 0:
            kinds.append(StoryKind.WEIGHT_PLAIN_READ_AS_SHUFFLED)
        else:
            kinds.append(StoryKind.WEIGHT_SHUFFLED_TWICE)
    if reading.weight_scale is not None and held.weight_scale is not None and reading.weight_scale != held.weight_scale:
        kinds.append(StoryKind.WEIGHT_SCALE_OTHER_ORDER)
    written = held.act_scale_written
    if reading.act_scale is not None and written is not None and reading.act_scale != written:
        kinds.append(
            StoryKind.ACT_SCALE_ROW_READ_AS_COL
            if written is ScaleLayout.ROW_MAJOR
            else StoryKind.ACT_SCALE_COL_READ_AS_ROW
        )
    return tuple(kinds)


@dataclass(frozen=True)
class LinearOperands:
    """One rank's captured operands of a linear step, and the checkpoint's values of its weight.

    `x` is the captured input: unquantized (bf16/fp32), or fp8 codes with `act_scale` their scale
    buffer as captured (strides and all). `weight` the captured weight bytes, `weight_scale` its
    captured block scale (None for an unquantized weight), `reference_weight` the checkpoint's fp32
    values of this rank's shard. `scale_rows`: the rows of the scale buffer that `x`'s rows are, when the
    buffer holds every token and `x` only the kept ones (None: row for row).
    """

    x: torch.Tensor
    act_scale: torch.Tensor | None
    weight: torch.Tensor
    weight_scale: torch.Tensor | None
    reference_weight: torch.Tensor
    out_dtype: torch.dtype
    block: tuple[int, int] = (128, 128)
    scale_rows: tuple[int, ...] | None = None
    # The kernel multiplies FP8 weights with the unquantized input (W8A16: vLLM's CPU
    # CPUFp8BlockScaledMMKernel, apply_input_quant = False): no activation quant is recomputed.
    w8a16: bool = False

    def act_scale_read(self, order: ScaleLayout) -> torch.Tensor:
        """The activation scale as a reader taking its buffer in `order` sees it, at `x`'s rows: the whole
        buffer is read first, since a misread mixes every token's scales."""
        scale = read_scale(self.act_scale, order, "captured activation scale")
        return scale if self.scale_rows is None else scale[list(self.scale_rows)]

    @property
    def quantized(self) -> bool:
        return self.weight.element_size() == 1

    @property
    def fmt(self):
        return fp8_format(self.weight.dtype) if self.quantized else None


def _shuffle_fits(w: torch.Tensor) -> bool:
    return w.dim() == 2 and w.shape[0] % SHUFFLE[0] == 0 and w.shape[1] % (2 * SHUFFLE[1]) == 0


def weight_values(
    ops: LinearOperands, unshuffles: int | None, scale_order: ScaleLayout | None, vnni_unpack: bool = False
) -> torch.Tensor:
    """fp32 (N, K) weight values a reader takes: the checkpoint's (None), else the captured bytes
    un-packed from VNNI (`vnni_unpack`) or un-shuffled `unshuffles` times, times the block scale read in
    `scale_order`."""
    if unshuffles is None:
        return ops.reference_weight
    data = ops.weight.contiguous()
    if vnni_unpack:
        data = vnni_unpack_weight(data, name="captured weight")
    for _ in range(unshuffles):
        data = unshuffle_weight(data, SHUFFLE, name="captured weight")
    if not ops.quantized:
        return data.to(torch.float32)
    scale = read_scale(ops.weight_scale.contiguous(), scale_order or ScaleLayout.ROW_MAJOR, "captured weight scale")
    if ops.w8a16:
        # The W8A16 kernel's own FP8 decode (`kernels.vllm_cpu`), times the block scale in fp32.
        expanded = scale.contiguous().repeat_interleave(ops.block[0], 0).repeat_interleave(ops.block[1], 1)
        return w8a16_decode(data) * expanded[: data.shape[0], : data.shape[1]]
    return block_dequantize(data, scale.contiguous(), ops.block)


def act_scale_orders(ops: LinearOperands) -> tuple[ScaleLayout, ...]:
    """The activation-scale byte orders worth trying: both when M > 1 and G > 1, else one (they coincide)."""
    if ops.act_scale is None or ops.act_scale.dim() != 2:
        return ()
    m, g = ops.act_scale.shape
    if m == 1 or g == 1:
        return (ScaleLayout.ROW_MAJOR,)
    return (ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR)


def input_values(ops: LinearOperands, act_order: ScaleLayout | None) -> torch.Tensor:
    """fp32 (M, K) input values a reader takes, with the activation scale read in `act_order`."""
    x = ops.x
    if not ops.quantized or (ops.w8a16 and x.element_size() > 1):
        return x.to(torch.float32)
    fmt = ops.fmt
    if x.element_size() == 1:
        codes = x
    else:
        codes, _, _ = group_quantize(x.to(torch.float32), GROUP, fmt, quant_flavor(REQUANT_FLAVOR), False, name="input")
    if ops.act_scale is None or act_order is None:
        if x.element_size() == 1:
            raise ValueError("captured fp8 input without its activation scale cannot be dequantized")
        _, scale, _ = group_quantize(x.to(torch.float32), GROUP, fmt, quant_flavor(REQUANT_FLAVOR), False, name="input")
    else:
        scale = ops.act_scale_read(act_order)
    m, k = codes.shape
    return (fmt.decode(codes).view(m, k // GROUP, GROUP) * scale.unsqueeze(-1)).view(m, k)


def written_act_order(ops: LinearOperands, producer_output: torch.Tensor | None) -> ScaleLayout | None:
    """The byte order the activation scale was written in, from the data: the order whose values
    match the input's group amax / fmt max (an unquantized input), or whose dequantized input matches
    the producer's unquantized output (an fp8 input); else the order its strides claim."""
    orders = act_scale_orders(ops)
    if len(orders) < 2:
        return orders[0] if orders else None
    fmt = ops.fmt
    if ops.x.element_size() > 1:
        m, k = ops.x.shape
        expected = ops.x.to(torch.float32).abs().view(m, k // GROUP, GROUP).amax(-1) / fmt.max
        errors = {o: rel_l2(ops.act_scale_read(o), expected) for o in orders}
    elif producer_output is not None and producer_output.shape == ops.x.shape and producer_output.element_size() > 1:
        errors = {o: rel_l2(input_values(ops, o), producer_output) for o in orders}
    else:
        errors = {}
    best = min(errors, key=errors.get) if errors else None
    if best is not None and errors[best] < 0.1 * max(errors.values()):
        return best
    strides_col = ops.act_scale.stride(0) == 1 and ops.act_scale.stride(1) >= ops.act_scale.shape[0]
    return ScaleLayout.COL_MAJOR if strides_col else ScaleLayout.ROW_MAJOR


def linear_readings(ops: LinearOperands, held: Held) -> list[Reading]:
    """Every reading worth computing: the checkpoint weight, and the captured bytes read plainly or
    un-shuffled once (when the bytes are the checkpoint's in some shuffle), each block-scale order,
    crossed with each activation-scale order; readings of the captured bytes that amount to the
    correct read are left out (they compute the checkpoint's values)."""
    weight_reads: list[tuple[int | None, ScaleLayout | None, bool]] = [(None, None, False)]
    if held.checkpoint_bytes:
        unshuffles = (0, 1) if held.shuffles is not None and _shuffle_fits(ops.weight) else (0,)
        scale_orders = (None,)
        if ops.quantized and ops.weight_scale is not None and held.weight_scale is not None:
            nb, kb = ops.weight_scale.shape
            scale_orders = (
                (ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR) if nb > 1 and kb > 1 else (ScaleLayout.ROW_MAJOR,)
            )
        # A plain weight un-packed by a VNNI-aware reader, a packed one read plain or un-packed.
        packs = (False, True) if can_vnni_pack(tuple(ops.weight.shape), ops.weight.dtype) else (False,)
        weight_reads += [(r, ws, p) for r, ws, p in itertools.product(unshuffles, scale_orders, packs) if not (p and r)]
    act_orders = act_scale_orders(ops) if ops.quantized and not ops.w8a16 else ()
    readings = []
    for (r, ws, vnni), act in itertools.product(weight_reads, act_orders or (None,)):
        reading = Reading(r, ws, act, vnni)
        weight_wrong = any(
            k is not StoryKind.ACT_SCALE_ROW_READ_AS_COL and k is not StoryKind.ACT_SCALE_COL_READ_AS_ROW
            for k in reading_kinds(reading, held)
        )
        if r is not None and not weight_wrong:
            continue
        readings.append(reading)
    return readings


def compute_reading(ops: LinearOperands, reading: Reading, held: Held) -> torch.Tensor:
    """The step output a reader taking the operands as `reading` says computes (the output's dtype)."""
    act = reading.act_scale if reading.act_scale is not None else held.act_scale_written
    x = input_values(ops, act)
    scale_order = reading.weight_scale if reading.weight_scale is not None else held.weight_scale
    w = weight_values(ops, reading.weight_unshuffles, scale_order, reading.weight_vnni_unpack)
    return (x @ w.t()).to(ops.out_dtype)


# -- derived weights (W_UK, W_UV) ---------------------------------------------------------------------


def derived_from(kv_b: torch.Tensor, heads: int, nope: int, v_dim: int, which: str) -> torch.Tensor:
    """W_UK (h, P, Lkv) or W_UV (h, V, Lkv) from kv_b_proj's fp32 values (h * (P + V), Lkv), as
    `model.absorbed` lays them out."""
    per_head = kv_b.view(heads, nope + v_dim, kv_b.shape[1])
    return per_head[:, :nope] if which == "W_UK" else per_head[:, nope:]


def fitted_rel_err(observed: torch.Tensor, candidate: torch.Tensor) -> float:
    """Relative L2 error of `observed` against the best scalar multiple of `candidate` (a derived
    weight may be stored per-tensor quantized, its scale kept elsewhere): over every arrangement of
    the candidate's three dims that has the observed shape (or its element count, flattened)."""
    obs = observed.to(torch.float64)
    best = float("inf")
    for perm in itertools.permutations(range(candidate.dim())):
        arranged = candidate.permute(perm)
        if tuple(arranged.shape) != tuple(obs.shape):
            if arranged.numel() != obs.numel() or obs.dim() == candidate.dim():
                continue
            arranged = arranged.reshape(obs.shape)
        c = arranged.to(torch.float64)
        denom = float((c * c).sum())
        factor = float((obs * c).sum()) / denom if denom else 0.0
        best = min(best, rel_l2(factor * c, obs) if float(obs.abs().sum()) else rel_l2(c, obs))
    return best
