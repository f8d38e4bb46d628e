"""Layout diff of two captures of one layer: `md.diff_captures(a, b) -> CaptureDiff`.

Two questions, answered as data (words are made in viz/ and the CLI):

- weights and scales, per rank of each side: are the bytes the base's bytes (`ByteRelation.SAME`),
  the base's bytes shuffled k times (`SHUFFLED`), a block scale's values in another memory order
  (`SCALE_ORDER`), the base's bytes VNNI-packed (`VNNI_PACKED`, vLLM's CPU kernels), or other values
  (`VALUE`)? The base is the checkpoint when one is passed: shuffle
  counts are then absolute. Without one the base is a side's own gathered bytes (chosen as below) and
  counts are relative to it. A weight then differs between the sides in `Difference.LAYOUT` (same values, other order) or in
  `Difference.VALUE`. The byte tests are `layouts.forensics`' (compare_tensor, identify_scale_layout).
- activations, per step: the error of b's gathered output against a's, judged by the rule of
  `verdict` (`step_verdict`) against the FP8 noise floor computed for the capture's inputs
  (`explain.reference.capture_floor`: max of the floors at both TP sizes, as a correct
  run at either size may sit anywhere below its own) - after taking away what the two layer inputs'
  own difference makes of the step (`explain.inherited`): a step is judged on its `residual`, and one
  that differs only by what it inherited is `StepVerdict.INHERITED`, not diverged. Column-parallel
  outputs also get each side's per-rank slices of the residual, so a single bad rank shows.

The weights taken as right are named (`CaptureDiff.truth`, `explain.truth`). Without a checkpoint, the
base each weight's bytes are related to is chosen the same way whatever the argument order: the bytes
both sides hold; else the side whose bytes the other's are a re-layout of (the plainer; engines only
shuffle forward); else neither (`LayoutBase.OTHER_SIDE`: each side against the other's bytes) and the
truth is UNDECIDED, with the weights in dispute named.

By convention `a` is the baseline (TP2, or mla_debug's reference capture) and `b` the capture under
test (`CaptureDiff.baseline`); `diff_captures(capture, reference=True)` builds the reference side from
`run_layer` on the capture's checkpoint and inputs (`explain.reference.reference_capture`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from .._checks import find
from .._json_numbers import float_from_json, float_to_json
from .._json_records import JsonRecord
from ..capture import Capture, CapturedTensor, Shard, TensorRole
from ..capture.gather import RELAID_ATTRS
from ..layouts import ScaleLayout, VerdictKind, compare_tensor, identify_scale_layout, vnni_unpack
from ..layouts.scale_layout import scale_memory
from ..model import Checkpoint
from ..model.records import StepRecord
from ..numerics import rel_l2
from ..verdict import step_verdict
from ..verdict.measures import closeness, measures_from_json, measures_to_json
from .document import JsonDocument, check_document
from .inherited import InputDifference, inherited_deltas, input_difference
from .truth import Truth, TruthSource
from .untestable import Untestable

SCHEMA = 2
READABLE_SCHEMAS = (1, 2)  # schema 1: before truth, layer input, verdicts and residuals were recorded
KIND = "capture-diff"
# The step whose floor the layer output is judged by (mla_debug's name of the all-reduced output).
LAYER_OUTPUT_STEP = "all_reduce"
FUSED_QKV_A = ("fused_qkv_a_proj", ("q_a_proj", "kv_a_proj_with_mqa"))
WEIGHT_ROLES = (TensorRole.WEIGHT, TensorRole.WEIGHT_SCALE, TensorRole.DERIVED_WEIGHT)


class LayoutBase(str, Enum):
    """What the weights' bytes are compared with."""

    CHECKPOINT = "checkpoint"  # the checkpoint's bytes, sharded as each side holds them: absolute counts
    SIDE_A = "a"  # side a's gathered bytes: counts relative to a
    SIDE_B = "b"  # side b's gathered bytes: counts relative to b
    OTHER_SIDE = "other_side"  # no base decided: each side's ranks against the other side's gathered bytes
    # Side a's bytes VNNI-unpacked rank by rank, then gathered: both sides hold the same values, each rank
    # its shard VNNI-packed (vLLM's CPU kernels pack every rank's shard on its own, so the packed shards
    # of two TP sizes never gather to the same bytes).
    SIDE_A_VNNI_UNPACKED = "a-vnni-unpacked"


class ByteRelation(str, Enum):
    """How one rank's bytes relate to the base's bytes of the same shard."""

    SAME = "same"
    SHUFFLED = "shuffled"  # the base shuffled `shuffles` times with `shuffle_layout`
    VNNI_PACKED = "vnni_packed"  # the base VNNI-packed (`layouts.vnni`: vLLM's CPU kernels)
    SCALE_ORDER = "scale_order"  # a block scale holding the base's values in another order (`scale_layouts`)
    VALUE = "value"  # other values, in every order tried
    SHAPE = "shape"  # other shape or element size: the bytes cannot be compared


class Difference(str, Enum):
    """How a weight differs between the two sides."""

    NONE = "none"  # every rank of both sides relates to the base the same way
    LAYOUT = "layout"  # same values, another order on some rank
    VALUE = "value"  # other values (or another shape) on some rank


class StepStatus(str, Enum):
    COMPARED = "compared"
    SHAPE_DIFFERS = "shape_differs"  # the two sides recorded the step in different shapes
    ONLY_IN_A = "only_in_a"
    ONLY_IN_B = "only_in_b"
    UNTESTABLE = "untestable"  # not comparable for the reason in `StepComparison.untestable`


class StepVerdict(str, Enum):
    """A compared step, judged on its residual (b - a less what the layer inputs' difference explains)."""

    AGREES = "agrees"  # within the threshold
    INHERITED = "inherited"  # beyond the threshold, but the layer inputs' difference explains it
    DIVERGED = "diverged"  # beyond what the inputs' difference and the noise floor explain (or non-finite)
    UNJUDGED = "unjudged"  # no threshold (no truth), or an input difference that could not be propagated


@dataclass(frozen=True)
class RankLayout(JsonRecord):
    """One rank of one side: how its bytes of a weight relate to the base's shard."""

    side: str
    rank: int
    relation: ByteRelation
    shuffles: int | None = None
    shuffle_layout: tuple[int, int] | None = None
    period: int | None = None
    same_bytes_as: tuple[int, ...] = ()  # other shuffle counts giving these very bytes (256-byte rows)
    scale_layouts: tuple[ScaleLayout, ...] = ()
    transposed: bool = False  # a block scale stored in the transposed shape (K/128, N/128)

    @property
    def signature(self) -> tuple:
        """What two ranks must share to hold the same layout of the same values."""
        if self.relation is ByteRelation.SHUFFLED and self.period:
            return (self.relation, self.shuffle_layout, self.shuffles % self.period)
        return (self.relation, self.scale_layouts, self.transposed)


@dataclass(frozen=True)
class WeightDiff(JsonRecord):
    """One weight, scale or derived weight: each side's ranks against the base, and the verdict."""

    name: str
    role: TensorRole
    base: LayoutBase
    ranks: tuple[RankLayout, ...]
    difference: Difference

    def side(self, side: str) -> tuple[RankLayout, ...]:
        return tuple(r for r in self.ranks if r.side == side)


@dataclass(frozen=True)
class StepComparison:
    """One step's gathered output of b against a's, by `verdict`'s rule, on the residual.

    `rel_err` (and max_abs, cosine, snr_db) compare the outputs as they are; `inherited` is the part of
    b - a that the layer inputs' difference explains, relative to a (0 when the inputs are the same
    bytes, None when it could not be propagated); `residual` what is left, the number `threshold` judges
    (`verdict`; `diverged` is verdict DIVERGED). `rank_errors` / `rank_errors_a` are b's / a's per-rank
    slices of the residual of a column-parallel output (empty otherwise). `floor`/`threshold` are None
    without a noise floor. `untestable` says why an UNTESTABLE step was not compared.
    """

    step: str
    status: StepStatus
    rel_err: float = math.nan
    max_abs: float = math.nan
    cosine: float = math.nan
    snr_db: float = math.nan
    floor: float | None = None
    threshold: float | None = None
    diverged: bool = False
    rank_errors: tuple[float, ...] = ()
    shape_a: tuple[int, ...] = ()
    shape_b: tuple[int, ...] = ()
    verdict: StepVerdict | None = None
    inherited: float | None = None
    residual: float = math.nan
    rank_errors_a: tuple[float, ...] = ()
    untestable: Untestable | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "status": self.status.value,
            "verdict": None if self.verdict is None else self.verdict.value,
            "untestable": None if self.untestable is None else self.untestable.value,
            "rel_err": float_to_json(self.rel_err),
            "inherited": float_to_json(self.inherited),
            "residual": float_to_json(self.residual),
            **measures_to_json(self),
            "rank_errors": [float_to_json(e) for e in self.rank_errors],
            "rank_errors_a": [float_to_json(e) for e in self.rank_errors_a],
            "shape_a": list(self.shape_a),
            "shape_b": list(self.shape_b),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepComparison:
        step = str(data["step"])

        def number(key: str) -> float:
            value = float_from_json(data.get(key), f"step {step}: {key}")
            return math.nan if value is None else value

        def errors(key: str) -> tuple[float, ...]:
            return tuple(
                math.nan if (v := float_from_json(e, f"step {step}: {key}")) is None else v for e in data.get(key, ())
            )

        status, measures = StepStatus(data["status"]), measures_from_json(data, f"step {step}")
        diverged, threshold = measures["diverged"], measures["threshold"]
        verdict = data.get("verdict")
        if "verdict" not in data and status is StepStatus.COMPARED:  # schema 1: judged on rel_err, inputs assumed equal
            verdict = (
                StepVerdict.DIVERGED if diverged else StepVerdict.AGREES if threshold is not None else StepVerdict.UNJUDGED
            )
        untestable = data.get("untestable")
        return cls(
            step=step,
            status=status,
            rel_err=number("rel_err"),
            **measures,
            rank_errors=errors("rank_errors"),
            shape_a=tuple(data.get("shape_a", ())),
            shape_b=tuple(data.get("shape_b", ())),
            verdict=None if verdict is None else StepVerdict(verdict),
            inherited=float_from_json(data.get("inherited"), f"step {step}: inherited"),
            residual=number("residual") if "residual" in data else number("rel_err"),
            rank_errors_a=errors("rank_errors_a"),
            untestable=None if untestable is None else Untestable(untestable),
        )


@dataclass(frozen=True)
class CaptureSide(JsonRecord):
    """What identifies one side of a diff (no tensors)."""

    engine: str
    engine_version: str | None
    tp_size: int
    layer: int
    mode: str | None
    tokens: int

    @classmethod
    def of(cls, capture: Capture) -> CaptureSide:
        m = capture.manifest
        return cls(m.engine.name, m.engine.version, m.tp_size, m.layer, m.mode, len(m.tokens))


@dataclass(frozen=True)
class CaptureDiff(JsonDocument):
    """Weights (per rank) and steps (gathered, plus b's per-rank slices) of capture b against capture a."""

    a: CaptureSide
    b: CaptureSide
    base: LayoutBase
    weights: tuple[WeightDiff, ...] = ()
    steps: tuple[StepComparison, ...] = ()
    floor_source: str | None = None  # what the noise floor was computed from; None: no floor
    notes: tuple[str, ...] = field(default_factory=tuple)
    truth: Truth = Truth(TruthSource.UNRECORDED)
    layer_input: InputDifference | None = None

    @property
    def baseline(self) -> CaptureSide:
        """The side b is judged against (a, by convention: the first argument, or the reference run)."""
        return self.a

    @property
    def diverged_steps(self) -> list[str]:
        return [s.step for s in self.steps if s.diverged]

    @property
    def untested_steps(self) -> list[StepComparison]:
        """Steps present on both sides that were not judged: untestable, or compared without a verdict."""
        return [
            s
            for s in self.steps
            if s.status is StepStatus.UNTESTABLE or (s.status is StepStatus.COMPARED and s.verdict is StepVerdict.UNJUDGED)
        ]

    @property
    def suspects(self) -> list[tuple[str, RankLayout]]:
        """(weight, rank) pairs whose bytes are not the base's - against a checkpoint or a decided side,
        so they name the side and rank at fault; under OTHER_SIDE both sides' differing ranks appear."""
        return [(w.name, r) for w in self.weights for r in w.ranks if r.relation is not ByteRelation.SAME]

    @property
    def first_divergent(self) -> StepComparison | None:
        return next((s for s in self.steps if s.diverged), None)

    @property
    def layout_differences(self) -> list[WeightDiff]:
        return [w for w in self.weights if w.difference is Difference.LAYOUT]

    @property
    def value_differences(self) -> list[WeightDiff]:
        return [w for w in self.weights if w.difference is Difference.VALUE]

    def step(self, name: str) -> StepComparison:
        return find(self.steps, lambda s: s.step, name, f"no step {name!r} in the diff", "steps:")

    def weight(self, name: str) -> WeightDiff:
        return find(self.weights, lambda w: w.name, name, f"no weight {name!r} in the diff", "weights:")

    @property
    def table(self):
        """pandas DataFrame, one row per step: errors (as they are, inherited, residual), yardsticks,
        verdict, a's (a_rank<r>) and b's (rank<r>) per-rank residuals."""
        import pandas as pd  # here: the package works without pandas

        rows = [
            {
                "step": s.step,
                "status": s.status.value,
                "rel_err": s.rel_err,
                "inherited": s.inherited,
                "residual": s.residual,
                "max_abs": s.max_abs,
                "cosine": s.cosine,
                "snr_db": s.snr_db,
                "floor": s.floor,
                "threshold": s.threshold,
                "verdict": None if s.verdict is None else s.verdict.value,
                "diverged": s.diverged,
                **{f"a_rank{r}": e for r, e in enumerate(s.rank_errors_a)},
                **{f"rank{r}": e for r, e in enumerate(s.rank_errors)},
            }
            for s in self.steps
        ]
        return pd.DataFrame(rows)

    @property
    def weights_table(self):
        """pandas DataFrame, one row per (weight, side, rank): the byte relation to the base."""
        import pandas as pd

        rows = [
            {
                "tensor": w.name,
                "role": w.role.value,
                "difference": w.difference.value,
                "side": r.side,
                "rank": r.rank,
                "relation": r.relation.value,
                "shuffles": r.shuffles,
                "shuffle_layout": r.shuffle_layout,
                "scale_layouts": tuple(s.name for s in r.scale_layouts),
                "transposed": r.transposed,
            }
            for w in self.weights
            for r in w.ranks
        ]
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "schema": SCHEMA,
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "base": self.base.value,
            "truth": self.truth.to_dict(),
            "layer_input": None if self.layer_input is None else self.layer_input.to_dict(),
            "floor_source": self.floor_source,
            "notes": list(self.notes),
            "weights": [w.to_dict() for w in self.weights],
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaptureDiff:
        check_document(data, KIND, READABLE_SCHEMAS, "capture diff")
        return cls(
            a=CaptureSide.from_dict(data["a"]),
            b=CaptureSide.from_dict(data["b"]),
            base=LayoutBase(data["base"]),
            weights=tuple(WeightDiff.from_dict(w) for w in data.get("weights", ())),
            steps=tuple(StepComparison.from_dict(s) for s in data.get("steps", ())),
            floor_source=data.get("floor_source"),
            notes=tuple(data.get("notes", ())),
            truth=Truth.from_dict(data.get("truth")),
            layer_input=InputDifference.from_dict(data.get("layer_input")),
        )


# -- weights -----------------------------------------------------------------------------------------


def _shard_of(full: torch.Tensor, part: CapturedTensor, tp_size: int, rank: int) -> torch.Tensor | None:
    """The slice of `full` that `part` (rank `rank` of `tp_size`) holds, or None when it cannot be cut."""
    if part.shard is not Shard.SPLIT:
        return full
    dim = part.shard_dim % full.dim() if full.dim() else 0
    if full.dim() == 0 or full.shape[dim] % tp_size:
        return None
    return full.chunk(tp_size, dim=dim)[rank]


def _scale_relation(side: str, rank: int, obs: torch.Tensor, ref: torch.Tensor) -> RankLayout:
    """A block scale against the base's values: same memory order, another presentation, or other values."""
    if obs.dim() != 2 or ref.dim() != 2 or obs.dtype != ref.dtype:
        return RankLayout(side, rank, ByteRelation.SHAPE)
    transposed = obs.shape != ref.shape
    if transposed and tuple(obs.shape) != tuple(ref.shape)[::-1]:
        return RankLayout(side, rank, ByteRelation.SHAPE)
    buffer = obs.t() if transposed else obs
    found = identify_scale_layout(buffer, ref)
    if not transposed and ScaleLayout.ROW_MAJOR in found:
        return RankLayout(side, rank, ByteRelation.SAME)
    if found:
        return RankLayout(side, rank, ByteRelation.SCALE_ORDER, scale_layouts=found, transposed=transposed)
    if (
        not transposed
        and obs.is_contiguous()
        and ref.is_contiguous()
        and torch.equal(scale_memory(obs), scale_memory(ref))
    ):
        return RankLayout(side, rank, ByteRelation.SAME)
    return RankLayout(side, rank, ByteRelation.VALUE)


def byte_relation(
    name: str, role: TensorRole, side: str, rank: int, obs: torch.Tensor, ref: torch.Tensor
) -> RankLayout:
    """How `obs` (one rank's tensor) relates to `ref` (the base's shard of it)."""
    if role is TensorRole.WEIGHT_SCALE:
        return _scale_relation(side, rank, obs, ref)
    verdict = compare_tensor(name, obs, ref)
    kind = verdict.kind
    if kind is VerdictKind.PLAIN:
        return RankLayout(
            side, rank, ByteRelation.SAME, shuffles=0, same_bytes_as=tuple(m.shuffles for m in verdict.same_bytes_as)
        )
    if kind is VerdictKind.SHUFFLED:
        m = verdict.match
        return RankLayout(side, rank, ByteRelation.SHUFFLED, m.shuffles, tuple(m.layout), m.period)
    if kind is VerdictKind.VNNI_PACKED:
        return RankLayout(side, rank, ByteRelation.VNNI_PACKED)
    if kind in (VerdictKind.SHAPE_DIFFERS, VerdictKind.DTYPE_DIFFERS):
        return RankLayout(side, rank, ByteRelation.SHAPE)
    return RankLayout(side, rank, ByteRelation.VALUE)


def checkpoint_tensor(ckpt: Checkpoint, name: str) -> torch.Tensor | None:
    """The checkpoint's full tensor for a captured weight name (a fused q_a/kv_a linear concatenated from
    its two modules), or None when the checkpoint has nothing under that name."""
    if name in ckpt.tensors:
        return ckpt.tensors[name]
    fused, parts = FUSED_QKV_A
    if name.startswith(f"{fused}."):
        suffix = name[len(fused) :]
        pieces = [ckpt.tensors.get(p + suffix) for p in parts]
        if all(p is not None for p in pieces):
            return torch.cat(pieces, dim=0)
    return None


def _relate_side(name: str, role: TensorRole, side: str, capture: Capture, full: torch.Tensor) -> list[RankLayout]:
    found = []
    for rank in sorted(capture.ranks, key=lambda r: r.rank):
        part = rank.tensors[name]
        ref = _shard_of(full, part, capture.tp_size, rank.rank)
        if ref is None:
            found.append(RankLayout(side, rank.rank, ByteRelation.SHAPE))
        else:
            found.append(byte_relation(name, role, side, rank.rank, part.tensor, ref))
    return found


def _difference(ranks: list[RankLayout]) -> Difference:
    if any(r.relation in (ByteRelation.VALUE, ByteRelation.SHAPE) for r in ranks):
        return Difference.VALUE
    return Difference.NONE if len({r.signature for r in ranks}) == 1 else Difference.LAYOUT


def _comparable(relations: list[RankLayout]) -> bool:
    return all(r.relation not in (ByteRelation.VALUE, ByteRelation.SHAPE) for r in relations)


def _relaid(capture: Capture, name: str) -> bool:
    """Whether the engine marked this weight's bytes as re-laid out after loading, on any rank."""
    return any(rank.tensors[name].attrs.get(a) is True for rank in capture.ranks for a in RELAID_ATTRS)


def _shuffle_count(ranks: list[RankLayout]) -> int:
    """The most shuffles any rank is from the base (per rank, so the side with more ranks weighs no more)."""
    return max((r.shuffles % r.period if r.period else r.shuffles for r in ranks if r.relation is ByteRelation.SHUFFLED), default=0)


def _same_bytes(x: torch.Tensor, y: torch.Tensor) -> bool:
    # Flattened first: a 0-dim tensor (a scalar scale) cannot be viewed as bytes of another element size.
    return x.shape == y.shape and x.dtype == y.dtype and torch.equal(
        x.contiguous().reshape(-1).view(torch.uint8), y.contiguous().reshape(-1).view(torch.uint8)
    )


def diff_weight(name: str, a: Capture, b: Capture, ckpt: Checkpoint | None) -> WeightDiff:
    """One weight of both sides against the checkpoint, or (without it) against the base chosen the same
    way whatever the argument order (see the module docstring)."""
    role = a.ranks[0].tensors[name].role
    full = checkpoint_tensor(ckpt, name) if ckpt is not None else None
    if full is not None:
        ranks = _relate_side(name, role, "a", a, full) + _relate_side(name, role, "b", b, full)
        return WeightDiff(name, role, LayoutBase.CHECKPOINT, tuple(ranks), _difference(ranks))
    sides = {"a": a, "b": b}
    held: dict[str, torch.Tensor] = {}
    for side, capture in sides.items():
        try:
            held[side] = capture.gathered(name)
        except (ValueError, KeyError):
            continue
    if not held:
        ranks = [RankLayout(s, r.rank, ByteRelation.SHAPE) for s, c in sides.items() for r in c.ranks]
        return WeightDiff(name, role, LayoutBase.OTHER_SIDE, tuple(ranks), Difference.VALUE)
    if len(held) == 2 and _same_bytes(held["a"], held["b"]):
        held.pop("b")  # the sides hold the same bytes: either is the base, and the relations are the same
    attempts = []
    for side, base_bytes in held.items():
        ranks = sorted(
            _relate_side(name, role, "a", a, base_bytes) + _relate_side(name, role, "b", b, base_bytes),
            key=lambda r: (r.side, r.rank),
        )
        # Better bases first: every rank relates to it by a layout; its bytes not marked re-laid; fewer shuffles.
        score = (not _comparable(ranks), _relaid(sides[side], name), _shuffle_count(ranks))
        attempts.append((score, LayoutBase(side), ranks))
    attempts.sort(key=lambda item: item[0])
    if len(attempts) == 1 or attempts[0][0] < attempts[1][0]:
        _, base, ranks = attempts[0]
        return WeightDiff(name, role, base, tuple(ranks), _difference(ranks))
    unpacked = _vnni_unpacked_base(name, role, a, b)
    if unpacked is not None:
        return unpacked
    # Nothing tells which side holds the checkpoint's bytes: each side is described against the other's.
    ranks = _relate_side(name, role, "a", a, held["b"]) + _relate_side(name, role, "b", b, held["a"])
    differ = Difference.LAYOUT if _comparable(ranks) else Difference.VALUE
    return WeightDiff(name, role, LayoutBase.OTHER_SIDE, tuple(ranks), differ)


def _vnni_unpacked_base(name: str, role: TensorRole, a: Capture, b: Capture) -> WeightDiff | None:
    """Without a checkpoint, when neither side's bytes are the other's: whether both hold the same values
    with every rank's shard VNNI-packed (side a un-packed rank by rank and gathered is the base, and every
    rank of both sides is that base's shard packed or plain). None when that does not hold."""
    if role is not TensorRole.WEIGHT:
        return None
    parts = sorted(a.ranks, key=lambda r: r.rank)
    try:
        unpacked = [vnni_unpack(r.tensors[name].tensor, name=name) for r in parts]
    except (ValueError, TypeError, KeyError):
        return None
    first = parts[0].tensors[name]
    if first.shard is Shard.SPLIT:
        full = torch.cat(unpacked, dim=first.shard_dim)
    elif first.shard is Shard.REPLICATED:
        full = unpacked[0]
    else:
        return None
    ranks = _relate_side(name, role, "a", a, full) + _relate_side(name, role, "b", b, full)
    if not _comparable(ranks) or not any(r.relation is ByteRelation.VNNI_PACKED for r in ranks):
        return None
    return WeightDiff(name, role, LayoutBase.SIDE_A_VNNI_UNPACKED, tuple(ranks), _difference(ranks))


# -- steps -------------------------------------------------------------------------------------------


@dataclass
class _Records:
    """What `verdict.step_verdict` reads of a reference run: its records by step."""

    records: dict[str, StepRecord]


def step_name(output_name: str) -> str:
    """The op an output tensor belongs to (`q_b_proj.output` -> "q_b_proj"; `layer.output` -> "layer")."""
    return output_name.removesuffix(".output")


def floor_key(output_name: str, tensor: CapturedTensor, floor: dict[str, float] | None) -> str:
    """The mla_debug step whose noise floor judges an output: its own op when the floor has it, else
    the step the capture tied it to (q_a_proj's output belongs to fused_qkv_a); the layer output is
    judged as the all-reduce."""
    if output_name == "layer.output":
        return LAYER_OUTPUT_STEP
    if output_name == "attention.output" and floor is not None and "absorb_uv" in floor:
        return "absorb_uv"  # the absorbed program: an engine's attention op returns W_UV's V-space rows
    op = step_name(output_name)
    if floor is None or op in floor or tensor.step is None:
        return op
    return tensor.step


def _rank_errors(baseline: torch.Tensor, out: torch.Tensor, part: CapturedTensor, tp_size: int) -> tuple[float, ...]:
    """Per-rank slices of rel_l2(out, baseline) along the rank's shard dim (a column-parallel output)."""
    if part.shard is not Shard.SPLIT or tp_size == 1:
        return ()
    dim = part.shard_dim % out.dim()
    if out.shape[dim] % tp_size:
        return ()
    return tuple(rel_l2(x, y) for x, y in zip(out.chunk(tp_size, dim), baseline.chunk(tp_size, dim)))


# What a step inherits from the layer inputs when they are the same bytes: nothing.
NO_INPUT_DIFFERENCE = "no input difference"


def compare_step(
    output_name: str,
    a: Capture,
    b: Capture,
    floor: dict[str, float] | None,
    delta: torch.Tensor | str | None = NO_INPUT_DIFFERENCE,
) -> StepComparison:
    """b's output against a's, judged on the residual: against a's output moved by `delta`, the change the
    layer inputs' difference alone makes (NO_INPUT_DIFFERENCE when the inputs are the same bytes; None
    when it could not be propagated: the step is then UNJUDGED unless non-finite)."""
    step = step_name(output_name)
    out_a, out_b = a.gathered(output_name), b.gathered(output_name)
    if out_a.shape != out_b.shape:
        return StepComparison(step, StepStatus.SHAPE_DIFFERS, shape_a=tuple(out_a.shape), shape_b=tuple(out_b.shape))
    key = floor_key(output_name, b.ranks[0].tensors[output_name], floor)
    raw = step_verdict(StepRecord(key, out_b), _Records({key: StepRecord(key, out_a)}), floor)
    err, step_floor, limit, raw_diverged = raw
    inherited, shifted = 0.0, out_a
    if delta is None:
        verdict = StepVerdict.DIVERGED if not math.isfinite(err) else StepVerdict.UNJUDGED
        residual, diverged, inherited = math.nan, verdict is StepVerdict.DIVERGED, None
    else:
        if isinstance(delta, torch.Tensor):
            shifted = out_a.to(torch.float32) + delta
            inherited = rel_l2(shifted, out_a.to(torch.float32))
        residual, _, _, diverged = step_verdict(StepRecord(key, out_b), _Records({key: StepRecord(key, shifted)}), floor)
        if diverged:
            verdict = StepVerdict.DIVERGED
        elif limit is None:
            verdict = StepVerdict.UNJUDGED
        else:
            verdict = StepVerdict.INHERITED if err > limit else StepVerdict.AGREES
    return StepComparison(
        step=step,
        status=StepStatus.COMPARED,
        rel_err=err,
        **closeness(out_b, out_a),
        floor=step_floor,
        threshold=limit,
        diverged=diverged,
        rank_errors=_rank_errors(shifted, out_b, b.ranks[0].tensors[output_name], b.tp_size),
        shape_a=tuple(out_a.shape),
        shape_b=tuple(out_b.shape),
        verdict=verdict,
        inherited=inherited,
        residual=residual,
        rank_errors_a=_rank_errors(shifted, out_b, a.ranks[0].tensors[output_name], a.tp_size),
    )


# -- the diff ----------------------------------------------------------------------------------------


def check_comparable(a: Capture, b: Capture) -> None:
    """Same layer config, layer index and token positions, else a ValueError naming what differs."""
    ca, cb = a.cfg.to_dict(), b.cfg.to_dict()
    differ = [k for k in ca if k not in ("name", "quantized") and ca[k] != cb.get(k)]
    if differ:
        raise ValueError(f"diff_captures: the captures hold differently shaped layers; they differ in {differ}")
    if a.manifest.layer != b.manifest.layer:
        raise ValueError(f"diff_captures: capture a holds layer {a.manifest.layer}, capture b layer {b.manifest.layer}")
    if a.manifest.positions != b.manifest.positions:
        raise ValueError(
            f"diff_captures: the captures ran other tokens: positions {list(a.manifest.positions)[:8]}... "
            f"and {list(b.manifest.positions)[:8]}...; capture both on the same inputs"
        )


def own_checkpoint(capture: Capture) -> Checkpoint | None:
    """The capture's weights as a checkpoint when it holds them in checkpoint layout, else None."""
    try:
        return capture.checkpoint()
    except (ValueError, KeyError):
        return None


def decide_truth(
    a: Capture, b: Capture, checkpoint: Checkpoint | None, weights: tuple[WeightDiff, ...]
) -> tuple[Truth, list[Checkpoint]]:
    """The truth of a diff and the checkpoints it may be read from: the one given; else the sides' own
    when they agree or the weight forensics (`diff_weight`) decided for one side; else none decided -
    both sides' checkpoints, the weights in dispute named. A side's own checkpoint is built only when
    needed (it gathers every weight)."""
    if checkpoint is not None:
        return Truth(TruthSource.CHECKPOINT), [checkpoint]
    sides = {"a": a, "b": b}
    differing = [w for w in weights if w.difference is not Difference.NONE]
    disputed = tuple(w.name for w in differing if w.base is LayoutBase.OTHER_SIDE)
    bases = {w.base.value for w in differing}
    if not disputed and len(bases) == 1:
        side = next(iter(bases))
        own = own_checkpoint(sides[side])
        if own is not None:
            return Truth(TruthSource(side)), [own]
    elif not differing:
        # The same bytes on both sides (or one side without weights): either side's, when in checkpoint layout.
        for side in ("a", "b"):
            own = own_checkpoint(sides[side])
            if own is not None:
                other = sides["b" if side == "a" else "a"]
                # The other side holds the same bytes: in checkpoint layout too unless its engine marked them re-laid.
                agree = bool(weights) and not any(_relaid(other, w.name) for w in weights)
                return Truth(TruthSource.SIDES_AGREE if agree else TruthSource(side)), [own]
        return Truth(TruthSource.NONE), []
    held = [c for c in (own_checkpoint(a), own_checkpoint(b)) if c is not None]
    if not held:
        return Truth(TruthSource.NONE), []
    return Truth(TruthSource.UNDECIDED, disputed or tuple(w.name for w in differing)), held


def _outputs(capture: Capture) -> list[str]:
    return [n for n in capture.names(TensorRole.OUTPUT)]


def _untestable_keyed(capture: Capture) -> Untestable | None:
    """Why the reference cannot compute this capture's steps from attention on (None: it can)."""
    from .reference import reference_inputs

    return reference_inputs(capture).untestable


def _yardsticks(
    a: Capture, b: Capture, inputs: InputDifference, truths: list[Checkpoint], need_floor: bool = True
) -> tuple[dict[str, float] | None, dict[str, torch.Tensor | str | None]]:
    """The noise floor (from each candidate truth, the larger per step: symmetric in the sides; None when
    not `need_floor`) and, per output name, what b inherits from its layer input's difference to a's (see
    compare_step). Each truth's dequantized twin and its run on a's inputs serve both."""
    from ..verdict.floor import dense_twin
    from .reference import KEYED_OUTPUTS, capture_floor, truth_run

    propagate = not (inputs.identical and inputs.context_identical)
    floors, deltas = [], {}
    for ckpt in truths if need_floor or (propagate and len(truths) == 1) else ():
        dense = dense_twin(ckpt)
        truth_a = truth_run(a, dense)
        if propagate and len(truths) == 1:
            deltas = dict(inherited_deltas(a, b, ckpt, dense, truth_a))
        del dense  # before the reference runs: the dequantized twin is the largest thing held
        if need_floor:
            floors.append(capture_floor(a, ckpt, tuple(sorted({a.tp_size, b.tp_size})), truth=truth_a))
        del truth_a
    floor = {step: max(f.get(step, 0.0) for f in floors) for step in floors[0]} if floors else None
    if not propagate:
        return floor, {}  # every step: NO_INPUT_DIFFERENCE
    if _untestable_keyed(a) or _untestable_keyed(b):
        deltas.update({name: None for name in KEYED_OUTPUTS})  # the truth lacked keys: its attention is not the engines'
    # Without one decided truth there is nothing to propagate the difference through: those steps are unjudged.
    return floor, {name: deltas.get(name) for name in _outputs(a)}


def _steps(
    a: Capture, b: Capture, floor: dict[str, float] | None, deltas: dict, keyed_untestable: Untestable | None
) -> tuple[StepComparison, ...]:
    from .reference import KEYED_OUTPUTS

    outputs_a, outputs_b = _outputs(a), set(_outputs(b))
    steps = []
    for name in outputs_a:
        if name not in outputs_b:
            steps.append(StepComparison(step_name(name), StepStatus.ONLY_IN_A))
        elif keyed_untestable is not None and name in KEYED_OUTPUTS:
            steps.append(StepComparison(step_name(name), StepStatus.UNTESTABLE, untestable=keyed_untestable))
        elif Shard.PER_RANK in {c.ranks[0].tensors[name].shard for c in (a, b)} and max(a.tp_size, b.tp_size) > 1:
            steps.append(StepComparison(step_name(name), StepStatus.UNTESTABLE, untestable=Untestable.PER_RANK_ONLY))
        else:
            steps.append(compare_step(name, a, b, floor, deltas.get(name, NO_INPUT_DIFFERENCE)))
    steps += [StepComparison(step_name(n), StepStatus.ONLY_IN_B) for n in _outputs(b) if n not in set(outputs_a)]
    return tuple(steps)


def diff_captures(
    a: Capture,
    b: Capture | None = None,
    checkpoint: Checkpoint | None = None,
    *,
    reference: bool = False,
    floor: dict[str, float] | None = None,
) -> CaptureDiff:
    """Diff capture `b` against capture `a`, the baseline (see the module docstring).

    `checkpoint` is the layer's weights as the engine loaded them: the truth that makes shuffle counts
    absolute, gives the noise floor and propagates the layer inputs' difference. Without it the sides'
    own weights are used when they agree or one side's are decidedly the plain ones (`CaptureDiff.truth`
    says which); otherwise the truth is UNDECIDED and no input difference is propagated.
    ``reference=True`` (without `b`) diffs `a` against mla_debug's reference run of that checkpoint on a's
    inputs (then the reference is side a). `floor` overrides the computed noise floor (per mla_debug step).

    >>> diff = md.diff_captures(md.load_capture("tp2"), md.load_capture("tp4"))
    >>> diff.diverged_steps, [w.name for w in diff.layout_differences], diff.truth.source
    """
    keyed_untestable = None
    if reference:
        if b is not None:
            raise ValueError("diff_captures: pass either b or reference=True, not both")
        ckpt = checkpoint if checkpoint is not None else own_checkpoint(a)
        if ckpt is None:
            raise ValueError(
                "diff_captures(reference=True): the capture's weights are not in checkpoint layout; "
                "pass checkpoint= (the checkpoint the engine loaded)"
            )
        from .reference import reference_capture

        truth = Truth(TruthSource.CHECKPOINT if checkpoint is not None else TruthSource.CAPTURE)
        keyed_untestable = _untestable_keyed(a)
        a, b = reference_capture(a, ckpt), a
        truths = [ckpt]
        weights = _weights(a, b, ckpt)
    elif b is None:
        raise ValueError("diff_captures: give a second capture b, or reference=True")
    else:
        check_comparable(a, b)
        weights = _weights(a, b, checkpoint)
        truth, truths = decide_truth(a, b, checkpoint, weights)
    inputs = input_difference(a, b)
    computed, deltas = _yardsticks(a, b, inputs, truths, need_floor=floor is None)
    floor_source = None
    if floor is not None:
        floor_source = "given"
    elif computed is not None:
        floor = computed
        sources = " and ".join(ckpt.source or "the checkpoint" for ckpt in truths)
        floor_source = f"reference run vs fp32 truth of {sources} at TP {sorted({a.tp_size, b.tp_size})}"
    steps = _steps(a, b, floor, deltas, keyed_untestable)
    base = LayoutBase.CHECKPOINT if truth.source is TruthSource.CHECKPOINT or reference else (
        weights[0].base if weights else LayoutBase.OTHER_SIDE
    )
    return CaptureDiff(
        CaptureSide.of(a), CaptureSide.of(b), base, weights, steps, floor_source, (), truth, inputs
    )


def _weights(a: Capture, b: Capture, ckpt: Checkpoint | None) -> tuple[WeightDiff, ...]:
    names_b = {n for n in b.names() if b.ranks[0].tensors[n].role in WEIGHT_ROLES}
    return tuple(
        diff_weight(n, a, b, ckpt) for n in a.names() if a.ranks[0].tensors[n].role in WEIGHT_ROLES and n in names_b
    )


def load_capture_diff(path: str | os.PathLike) -> CaptureDiff:
    """A capture diff written by `CaptureDiff.to_json` (or `mla-debug capture diff --json`)."""
    return CaptureDiff.load(path)
