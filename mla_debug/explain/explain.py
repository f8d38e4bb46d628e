"""Explain a capture: `md.explain_capture(capture, checkpoint) -> CaptureExplanation`.

For every step that diverges (from mla_debug's reference run on the same checkpoint and inputs, or in
a given `CaptureDiff`) and every derived weight the engine kept (W_UK, W_UV), the layout stories of
`explain.stories` are computed from the captured tensors of each rank and ranked by how well
they reproduce what the engine produced (relative L2 error, the worst rank's):

- EXPLAINED: on some rank a story reproduces the captured output within the step's tolerance and the
  correct computation does not, and on every other rank the correct computation does. Its kinds name
  the broken contracts, `story_ranks` the ranks (`explain.ranks`: stories are judged rank by rank); the
  ranking keeps every candidate with its error, the evidence the story rests on.
- CORRECT_FROM_INPUTS: the correct computation from the captured inputs reproduces the output on every
  rank: the step did its job. Where it diverged, the divergence is in its input (`inherited_from`: the
  layer input, or the step that produced it) or on the other side of the diff (`source`).
  A story that reproduces the output equally well (M == 1, 256-byte rows) is not preferred to it.
- NO_STORY: nothing reproduces the output on some rank: no known layout story explains this step.
- UNTESTABLE: the step is not one the stories recompute (rope, attention, the all-reduce), the capture
  lacks what they need (named in `missing`), or the diff could not compare it; `untestable` says which.

Every verdict rests on the weights taken as the checkpoint's (`CaptureExplanation.truth`, `explain.truth`): a checkpoint
passed in, else the capture's own bytes - then `assumes_weights` marks each verdict that relies on them
(a loader bug that wrote the wrong bytes looks correct against itself). Without a checkpoint and with a
diff whose sides hold different weights, the explanation is refused (the weights in dispute are named).

The tolerance of a step is its divergence threshold from the noise floor (`verdict`: max of
DIVERGENCE_FACTOR x floor and MIN_THRESHOLD), or `tolerance` where no floor is known; that of a derived
weight depends on the dtype it is stored in (`DERIVED_TOLERANCE`). Words are made in viz/ and the CLI.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import torch

from .._json_numbers import float_from_json, float_to_json
from .._json_records import JsonRecord
from ..capture import Capture, CapturedTensor, Shard, TensorRole
from ..kernels.vllm_cpu import VLLM_CLASS as W8A16_KERNEL
from ..layouts import ScaleLayout, can_vnni_pack, vnni_pack, vnni_unpack
from ..model import Checkpoint
from ..model.norms import rms_norm
from ..numerics import rel_l2
from .diff import (
    ByteRelation,
    CaptureDiff,
    CaptureSide,
    RankLayout,
    StepStatus,
    StepVerdict,
    byte_relation,
    checkpoint_tensor,
    diff_captures,
    own_checkpoint,
)
from .document import JsonDocument, check_document
from .format_stories import linear_format_candidates
from .ranks import (
    CORRECT,
    Outcome,
    RankOutcome,
    judge_ranks,
    judge_reduced,
    reduced_hypotheses,
    step_outcome,
)
from .stories import (
    Held,
    LinearOperands,
    Reading,
    StoryKind,
    compute_reading,
    derived_from,
    fitted_rel_err,
    linear_readings,
    reading_kinds,
    weight_values,
    written_act_order,
)
from .truth import Truth, TruthSource
from .untestable import Untestable

SCHEMA = 2
READABLE_SCHEMAS = (1, 2)  # schema 1: before per-rank verdicts, the truth and typed untestable reasons
KIND = "capture-explanation"
# Where no noise floor gives a step its threshold: the error a recomputation in another accumulation
# order and quant flavor stays under, far below what a misread operand gives (order 1).
DEFAULT_TOLERANCE = 0.05
# A derived weight stored in 1-byte (fp8, per-tensor scaled) / wider elements reproduces its
# derivation to the format's rounding; a misread gives order 1.
DERIVED_TOLERANCE = {1: 0.1, 2: 1e-2, 4: 1e-2, 8: 1e-2}
# The linear module whose weight a step multiplies by; a fused q_a/kv_a step by its two modules' rows.
STEP_LINEARS = {
    "fused_qkv_a": "fused_qkv_a_proj",
    "q_a_proj": "q_a_proj",
    "kv_a_proj_with_mqa": "kv_a_proj_with_mqa",
    "q_b_proj": "q_b_proj",
    "kv_b_proj": "kv_b_proj",
    "o_proj": "o_proj",
}
STEP_NORMS = ("q_a_layernorm", "kv_a_layernorm")
# The step whose unquantized output a pre-quantized input of this step was made from.
PRODUCERS = {"q_b_proj": "q_a_layernorm", "kv_b_proj": "kv_a_layernorm", "o_proj": "attention"}
DERIVED = {"W_UK": "absorb_uk", "W_UV": "absorb_uv"}
LAYER_INPUT = "layer.input"
# Where a step's input comes from: the first of these whose output the capture holds (engines that fuse
# q_a and kv_a record fused_qkv_a; transformers records the two).
INPUT_SOURCES = {
    "fused_qkv_a": (LAYER_INPUT,),
    "q_a_proj": (LAYER_INPUT,),
    "kv_a_proj_with_mqa": (LAYER_INPUT,),
    "q_a_layernorm": ("q_a_proj", "fused_qkv_a"),
    "kv_a_layernorm": ("kv_a_proj_with_mqa", "fused_qkv_a"),
    "q_b_proj": ("q_a_layernorm",),
    "kv_b_proj": ("kv_a_layernorm",),
    "o_proj": ("attention", "absorb_uv"),
}


class DivergenceSource(str, Enum):
    """Where a step that is what its inputs give got its divergence from."""

    LAYER_INPUT = "layer_input"  # its input is the layer's, and the two sides' layer inputs differ
    EARLIER_STEP = "earlier_step"  # its input is an earlier step's output, which differs too (`inherited_from`)
    OTHER_SIDE = "other_side"  # its input agrees with the other side's (up to the layer input's difference, taken
    # away): the other side's step departs
    UNKNOWN = "unknown"  # its input's producer was not compared (not captured, or not judged)


@dataclass(frozen=True)
class Candidate:
    """One candidate computation, ranked: its story kinds (CORRECT alone for the intended read), the
    reading it made, its error against the captured tensor on each rank and the worst of them."""

    rank: int
    kinds: tuple[StoryKind, ...]
    rel_err: float
    rank_errors: tuple[float, ...]
    weight_unshuffles: int | None = None
    weight_scale: ScaleLayout | None = None
    act_scale: ScaleLayout | None = None
    on_ranks: tuple[int, ...] = ()  # the TP ranks the reading was computed on (empty: every rank)
    weight_vnni_unpack: bool = False  # the reading un-packed the weight from VNNI (vLLM CPU's layout)

    @property
    def is_correct(self) -> bool:
        return self.kinds == (StoryKind.CORRECT,)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "kinds": [k.value for k in self.kinds],
            "rel_err": float_to_json(self.rel_err),
            "rank_errors": [float_to_json(e) for e in self.rank_errors],
            "weight_unshuffles": self.weight_unshuffles,
            "weight_scale": None if self.weight_scale is None else self.weight_scale.value,
            "act_scale": None if self.act_scale is None else self.act_scale.value,
            "on_ranks": list(self.on_ranks),
            **({"weight_vnni_unpack": True} if self.weight_vnni_unpack else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        def number(value):
            found = float_from_json(value, "candidate rel_err")
            return math.nan if found is None else found

        ws, act = data.get("weight_scale"), data.get("act_scale")
        return cls(
            rank=int(data["rank"]),
            kinds=tuple(StoryKind(k) for k in data["kinds"]),
            rel_err=number(data.get("rel_err")),
            rank_errors=tuple(number(e) for e in data.get("rank_errors", ())),
            weight_unshuffles=data.get("weight_unshuffles"),
            weight_scale=None if ws is None else ScaleLayout(ws),
            act_scale=None if act is None else ScaleLayout(act),
            on_ranks=tuple(int(r) for r in data.get("on_ranks", ())),
            weight_vnni_unpack=bool(data.get("weight_vnni_unpack", False)),
        )


@dataclass(frozen=True)
class StepExplanation(JsonRecord):
    """The stories tested on one step (or derived weight `tensor`), ranked best first.

    `ranks` holds each TP rank's verdict (`ranks.RankOutcome`); `held` the forensics of the
    bytes the step's weight holds on each rank against the checkpoint (`diff.RankLayout`);
    `act_scale_written` the byte order the activation scale was written in (from the data);
    `observed_rel_err` the step's divergence in the diff that selected it (`observed_verdict` its
    verdict there). For a step that is what its inputs give and that diverged, `inherited_from` names
    its input (the layer input or the producing step) and `source` where the divergence comes from.
    `untestable` says why an UNTESTABLE step was not tested (`missing` the tensors it lacks, `detail`
    more, as data); `assumes_weights` that the verdict rests on weights nobody vouched for.
    """

    step: str
    outcome: Outcome
    candidates: tuple[Candidate, ...] = ()
    tolerance: float | None = None
    tensor: str | None = None
    held: tuple[RankLayout, ...] = ()
    act_scale_written: ScaleLayout | None = None
    observed_rel_err: float | None = None
    missing: tuple[str, ...] = ()
    ranks: tuple[RankOutcome, ...] = ()
    untestable: Untestable | None = None
    detail: str = ""
    observed_verdict: StepVerdict | None = None
    inherited_from: str | None = None
    source: DivergenceSource | None = None
    assumes_weights: bool = False

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def story_ranks(self) -> tuple[int, ...]:
        """The TP ranks whose output a story explains (empty unless EXPLAINED)."""
        return tuple(r.rank for r in self.ranks if r.outcome is Outcome.EXPLAINED)

    @property
    def story(self) -> tuple[StoryKind, ...]:
        """The kinds of the explaining story (of the first rank it explains); () unless EXPLAINED."""
        if self.outcome is not Outcome.EXPLAINED:
            return ()
        explained = next((r for r in self.ranks if r.outcome is Outcome.EXPLAINED), None)
        if explained is not None:
            return explained.kinds
        return self.best.kinds if self.best else ()

    @property
    def stories_by_rank(self) -> dict[int, tuple[StoryKind, ...]]:
        return {r.rank: r.kinds for r in self.ranks if r.outcome is Outcome.EXPLAINED}

    @property
    def failing_ranks(self) -> tuple[int, ...]:
        """The TP ranks nothing explains (empty unless NO_STORY)."""
        return tuple(r.rank for r in self.ranks if r.outcome is Outcome.NO_STORY)

    @property
    def correct(self) -> Candidate | None:
        return next((c for c in self.candidates if c.is_correct), None)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepExplanation:
        if "untestable" not in data and data.get("outcome") == Outcome.UNTESTABLE.value:  # schema 1 had no reason
            reason = Untestable.MISSING_TENSORS if data.get("missing") else Untestable.NOT_RECOMPUTED
            data = {**data, "untestable": reason.value}
        return super().from_dict(data)


@dataclass(frozen=True)
class CaptureExplanation(JsonDocument):
    """Every explanation of one capture, and the diff that chose the steps."""

    explanations: tuple[StepExplanation, ...]
    diff: CaptureDiff | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    truth: Truth = Truth(TruthSource.UNRECORDED)

    @property
    def stories(self) -> list[StepExplanation]:
        """The explained steps and derived weights (empty for a clean capture)."""
        return [e for e in self.explanations if e.outcome is Outcome.EXPLAINED]

    @property
    def unexplained(self) -> list[StepExplanation]:
        return [e for e in self.explanations if e.outcome is Outcome.NO_STORY]

    @property
    def untested(self) -> list[StepExplanation]:
        """The steps and derived weights that could not be tested: no summary may call them correct."""
        return [e for e in self.explanations if e.outcome is Outcome.UNTESTABLE]

    def of(self, step: str) -> StepExplanation:
        for e in self.explanations:
            if e.step == step or e.tensor == step:
                return e
        raise KeyError(f"no explanation for {step!r}; explained: {[e.tensor or e.step for e in self.explanations]}")

    @property
    def table(self):
        """pandas DataFrame, one row per candidate: step, outcome, its place in the ranking (`rank`), kinds,
        the TP ranks it was computed on (empty: every rank), rel_err."""
        import pandas as pd  # here: the package works without pandas

        rows = [
            {
                "step": e.step,
                "tensor": e.tensor,
                "outcome": e.outcome.value,
                "rank": c.rank,
                "story": " + ".join(k.value for k in c.kinds),
                "on_ranks": c.on_ranks,
                "rel_err": c.rel_err,
                "tolerance": e.tolerance,
            }
            for e in self.explanations
            for c in (e.candidates or (None,))
            if c is not None
        ]
        columns = ["step", "tensor", "outcome", "rank", "story", "on_ranks", "rel_err", "tolerance"]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "schema": SCHEMA,
            "truth": self.truth.to_dict(),
            "notes": list(self.notes),
            "explanations": [e.to_dict() for e in self.explanations],
            "diff": None if self.diff is None else self.diff.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaptureExplanation:
        check_document(data, KIND, READABLE_SCHEMAS, "capture explanation")
        diff = data.get("diff")
        return cls(
            explanations=tuple(StepExplanation.from_dict(e) for e in data.get("explanations", ())),
            diff=None if diff is None else CaptureDiff.from_dict(diff),
            notes=tuple(data.get("notes", ())),
            truth=Truth.from_dict(data.get("truth")),
        )


# -- gathering what a step needs ------------------------------------------------------------------------


def _ranks(capture: Capture):
    return sorted(capture.ranks, key=lambda r: r.rank)


def _captured_weight(tensors: dict[str, CapturedTensor], module: str, suffix: str) -> torch.Tensor | None:
    """A rank's captured tensor of `module` + `suffix`; a fused q_a/kv_a linear from its two modules."""
    name = module + suffix
    if name in tensors:
        return tensors[name].tensor
    if module == "fused_qkv_a_proj":
        parts = [tensors.get(f"{m}{suffix}") for m in ("q_a_proj", "kv_a_proj_with_mqa")]
        if all(p is not None for p in parts):
            return torch.cat([p.tensor for p in parts], dim=0)
    return None


def _shard(full: torch.Tensor, like: CapturedTensor | None, tp: int, rank: int) -> torch.Tensor:
    if like is None or like.shard is not Shard.SPLIT:
        return full
    return full.chunk(tp, dim=like.shard_dim % full.dim())[rank]


def _held(layout: RankLayout | None, scale_layout: RankLayout | None, written: ScaleLayout | None) -> Held:
    shuffles = None
    period = 1
    same = ()
    if layout is not None and layout.relation is ByteRelation.SAME:
        shuffles, same = 0, layout.same_bytes_as
        period = 2 if 2 in same else 1
    elif layout is not None and layout.relation is ByteRelation.SHUFFLED:
        shuffles, period = layout.shuffles, layout.period or 1
    vnni = layout is not None and layout.relation is ByteRelation.VNNI_PACKED
    weight_scale = None
    if scale_layout is None or scale_layout.relation is ByteRelation.SAME:
        weight_scale = ScaleLayout.ROW_MAJOR
    elif scale_layout.relation is ByteRelation.SCALE_ORDER and not scale_layout.transposed:
        weight_scale = (
            ScaleLayout.ROW_MAJOR if ScaleLayout.ROW_MAJOR in scale_layout.scale_layouts else ScaleLayout.COL_MAJOR
        )
    return Held(shuffles, period, same, weight_scale, written, vnni)


def _rank_candidates(
    errors: dict[tuple, dict[int, float]], keys: dict[tuple, tuple], ranks: list[int]
) -> tuple[Candidate, ...]:
    """Every reading ranked by its worst error over the ranks it was computed on (NaN where it was not)."""
    scored = []
    for key, per_rank in errors.items():
        kinds, reading = keys[key]
        values = [per_rank[r] for r in ranks if r in per_rank]
        worst = max(values) if values else math.nan
        on = () if len(per_rank) == len(ranks) else tuple(r for r in ranks if r in per_rank)
        scored.append((kinds, reading, worst, tuple(per_rank.get(r, math.nan) for r in ranks), on))
    scored.sort(key=lambda s: (math.isnan(s[2]), s[2], len(s[0])))
    return tuple(
        Candidate(
            i + 1, kinds, worst, errs, reading.weight_unshuffles, reading.weight_scale, reading.act_scale, on,
            reading.weight_vnni_unpack,
        )
        for i, (kinds, reading, worst, errs, on) in enumerate(scored)
    )


def _untestable(step: str, tolerance: float, reason: Untestable, missing: tuple[str, ...] = (), detail: str = ""):
    return StepExplanation(step, Outcome.UNTESTABLE, tolerance=tolerance, missing=missing, untestable=reason, detail=detail)


def explain_linear(step: str, capture: Capture, ckpt: Checkpoint, tolerance: float) -> StepExplanation:
    """Rank every reading of one linear step's operands on every rank (see `stories`), and judge
    each rank (`ranks`)."""
    module = STEP_LINEARS[step]
    names = (f"{step}.input", f"{step}.output")
    missing = tuple(n for n in names if n not in capture.ranks[0].tensors)
    full = checkpoint_tensor(ckpt, f"{module}.weight")
    if full is None:
        missing += (f"{module}.weight (checkpoint)",)
    if _captured_weight(capture.ranks[0].tensors, module, ".weight") is None:
        missing += (f"{module}.weight",)
    if missing:
        return _untestable(step, tolerance, Untestable.MISSING_TENSORS, missing)
    dense_full = _dense(ckpt, module)
    keys: dict[tuple, tuple] = {}
    outputs: dict[tuple, dict[int, torch.Tensor]] = {}
    observed: dict[int, torch.Tensor] = {}
    held_all: list[RankLayout] = []
    written_all: set[ScaleLayout | None] = set()
    tp = capture.tp_size
    producer = PRODUCERS.get(step)
    for rank in _ranks(capture):
        t = rank.tensors
        like = t.get(f"{module}.weight")
        weight = _captured_weight(t, module, ".weight")
        wscale = _captured_weight(t, module, ".weight_scale_inv")
        scale_full = checkpoint_tensor(ckpt, f"{module}.weight_scale_inv")
        ref_bytes = _shard(full, like, tp, rank.rank)
        layout = byte_relation(f"{module}.weight", TensorRole.WEIGHT, "capture", rank.rank, weight, ref_bytes)
        scale_layout = None
        if wscale is not None and scale_full is not None:
            scale_layout = byte_relation(
                f"{module}.weight_scale_inv",
                TensorRole.WEIGHT_SCALE,
                "capture",
                rank.rank,
                wscale,
                _shard(scale_full, t.get(f"{module}.weight_scale_inv"), tp, rank.rank),
            )
        held_all.append(layout)
        act = t.get(f"{step}.input_scale")
        x = t[f"{step}.input"].tensor
        out = t[f"{step}.output"].tensor
        if weight.element_size() == 1 and wscale is None:
            return _untestable(step, tolerance, Untestable.MISSING_TENSORS, (f"{module}.weight_scale_inv",))
        if x.element_size() == 1 and act is None:
            return _untestable(step, tolerance, Untestable.MISSING_TENSORS, (f"{step}.input_scale",))
        rows = x.reshape(-1, x.shape[-1]).shape[0]
        scale_rows = None
        if act is not None and act.tensor.dim() == 2 and act.tensor.shape[0] != rows:
            # A scale handed over whole (its byte order is the evidence, and a misread mixes every token's
            # scales) beside inputs kept for the chosen tokens: read whole, then compared at those rows.
            held_rows, kept = act.tensor.shape[0], tuple(capture.manifest.tokens)
            if len(kept) != rows or not kept or max(kept) >= held_rows:
                detail = f"{step}.input_scale holds {held_rows} rows for {rows} kept tokens"
                return _untestable(step, tolerance, Untestable.SCALE_ROWS, (f"{step}.input_scale",), detail)
            scale_rows = kept
        ops = LinearOperands(
            x=x.reshape(-1, x.shape[-1]),
            act_scale=None if act is None else act.tensor,
            scale_rows=scale_rows,
            weight=weight,
            weight_scale=wscale,
            reference_weight=_shard(dense_full, like, tp, rank.rank),
            out_dtype=out.dtype,
            block=tuple(ckpt.cfg.weight_block),
            w8a16=act is None and _w8a16(like),
        )
        producer_out = t.get(f"{producer}.output") if producer else None
        written = written_act_order(
            ops, None if producer_out is None else producer_out.tensor.reshape(ops.x.shape[0], -1)
        )
        written_all.add(written)
        held = _held(layout, scale_layout, written)
        observed[rank.rank] = out.reshape(ops.x.shape[0], -1)
        for reading in linear_readings(ops, held):
            kinds = reading_kinds(reading, held) or CORRECT
            key = (kinds, reading.weight_unshuffles, reading.weight_scale, reading.act_scale, reading.weight_vnni_unpack)
            keys[key] = (kinds, reading)
            outputs.setdefault(key, {})[rank.rank] = compute_reading(ops, reading, held)
        if held.shuffles == 0:
            # Scale representation stories (`explain.format_stories`) on the plain bytes.
            intended = (
                None if scale_full is None else _shard(scale_full, t.get(f"{module}.weight_scale_inv"), tp, rank.rank)
            )
            for kinds, y in linear_format_candidates(ops, intended):
                key = (kinds, "format")
                keys[key] = (kinds, Reading())
                outputs.setdefault(key, {})[rank.rank] = y
    ranks = sorted(observed)
    if _reduced_in_module(capture, step, module):
        # The engine's module all-reduced its row-parallel output: every rank holds the sum of the ranks'
        # products, so hypotheses on that sum judge the ranks.
        hypotheses = reduced_hypotheses(outputs, ranks, observed[ranks[0]])
        verdicts = judge_reduced(hypotheses, ranks, tolerance)
        errors = {h.key: {r: h.rel_err for r in ranks} for h in hypotheses if h.ranks is None}
        candidates = _rank_candidates(errors, keys, ranks) + _single_rank_candidates(hypotheses, keys, ranks)
        candidates = _renumbered(candidates)
    else:
        errors = {key: {r: rel_l2(y, observed[r]) for r, y in per_rank.items()} for key, per_rank in outputs.items()}
        verdicts = judge_ranks(errors, ranks, tolerance)
        candidates = _rank_candidates(errors, keys, ranks)
    written = next(iter(written_all)) if len(written_all) == 1 else None
    return StepExplanation(
        step,
        step_outcome(verdicts),
        candidates,
        tolerance,
        f"{module}.weight",
        tuple(held_all),
        written,
        ranks=verdicts,
    )


def _single_rank_candidates(hypotheses, keys: dict[tuple, tuple], ranks: list[int]) -> tuple[Candidate, ...]:
    """The one-rank hypotheses of an all-reduced output as candidates (on_ranks names the rank)."""
    found = []
    for h in hypotheses:
        if h.ranks is None:
            continue
        kinds, reading = keys[h.key]
        found.append(
            Candidate(0, kinds, h.rel_err, (h.rel_err,), reading.weight_unshuffles, reading.weight_scale, reading.act_scale, h.ranks)
        )
    return tuple(found)


def _renumbered(candidates: tuple[Candidate, ...]) -> tuple[Candidate, ...]:
    ordered = sorted(candidates, key=lambda c: (math.isnan(c.rel_err), c.rel_err, len(c.kinds)))
    return tuple(replace(c, rank=i + 1) for i, c in enumerate(ordered))


def _w8a16(weight: CapturedTensor | None) -> bool:
    """Whether the engine multiplied this weight with a W8A16 kernel (the input stays unquantized):
    vLLM CPU's CPUFp8BlockScaledMMKernel, named in the capture's kernel attribute."""
    return weight is not None and W8A16_KERNEL in str(weight.attrs.get("kernel", ""))


def _reduced_in_module(capture: Capture, step: str, module: str) -> bool:
    """Whether each rank's captured output is the all-reduced sum of row-parallel products (the weight
    is split on its input dim while the output is whole on every rank), as transformers' RowwiseParallel
    returns it."""
    tensors = capture.ranks[0].tensors
    weight, out = tensors.get(f"{module}.weight"), tensors.get(f"{step}.output")
    return (
        capture.tp_size > 1
        and weight is not None
        and weight.shard is Shard.SPLIT
        and weight.shard_dim % 2 == 1
        and out is not None
        and out.shard is Shard.REPLICATED
    )


def _dense(ckpt: Checkpoint, module: str) -> torch.Tensor:
    if module == "fused_qkv_a_proj":
        return torch.cat([ckpt.dense_weight("q_a_proj"), ckpt.dense_weight("kv_a_proj_with_mqa")])
    return ckpt.dense_weight(module)


def explain_norm(step: str, capture: Capture, ckpt: Checkpoint, tolerance: float) -> StepExplanation:
    """A norm step: only the correct computation (RMSNorm of the captured input) is a candidate."""
    names = (f"{step}.input", f"{step}.output")
    missing = tuple(n for n in names if n not in capture.ranks[0].tensors)
    if missing:
        return _untestable(step, tolerance, Untestable.MISSING_TENSORS, missing)
    errors: dict[int, float] = {}
    weight = ckpt.norm_weight(step)
    for rank in _ranks(capture):
        x, out = rank.tensors[names[0]].tensor, rank.tensors[names[1]].tensor
        expected = rms_norm(x.to(torch.float32), weight.to(torch.float32), ckpt.cfg.rms_norm_eps).to(out.dtype)
        errors[rank.rank] = rel_l2(expected, out)
    ranks = sorted(errors)
    key = (CORRECT,)
    verdicts = judge_ranks({key: errors}, ranks, tolerance)
    candidates = _rank_candidates({key: errors}, {key: (CORRECT, Reading())}, ranks)
    return StepExplanation(step, step_outcome(verdicts), candidates, tolerance, f"{step}.weight", ranks=verdicts)


def explain_derived(name: str, capture: Capture, ckpt: Checkpoint) -> StepExplanation:
    """W_UK / W_UV as kept by the engine against their derivation from the checkpoint's kv_b_proj
    values and from the captured kv_b_proj bytes read directly, rank by rank. A derived weight the engine
    keeps VNNI-packed (attrs layout "vnni") is un-packed first; where the engine released kv_b_proj after
    deriving (the manifest's `unrecorded`), the story tested is the checkpoint's bytes VNNI-packed and read
    directly (vLLM CPU's guard on kv_b_proj dropped)."""
    step = DERIVED[name]
    cfg = ckpt.cfg
    full = ckpt.tensors["kv_b_proj.weight"]
    scale_full = ckpt.tensors.get("kv_b_proj.weight_scale_inv")
    dense_full = ckpt.dense_weight("kv_b_proj")
    tp = capture.tp_size
    heads = cfg.num_heads // tp
    dtype_size = capture.ranks[0].tensors[name].tensor.element_size()
    tolerance = DERIVED_TOLERANCE.get(dtype_size, DERIVED_TOLERANCE[2])
    released = any(u.name == "kv_b_proj.weight" for u in capture.manifest.unrecorded)
    errors: dict[tuple, dict[int, float]] = {}
    keys: dict[tuple, tuple] = {}
    held_all = []
    for rank in _ranks(capture):
        t = rank.tensors
        observed = t[name].tensor
        if t[name].attrs.get("layout") == "vnni":
            observed = vnni_unpack(observed, name=name)
        like = t.get("kv_b_proj.weight")
        # kv_b_proj is column-parallel: each rank derives from its rows (its heads), recorded or not.
        dense = dense_full.chunk(tp, dim=0)[rank.rank] if like is None else _shard(dense_full, like, tp, rank.rank)
        correct = derived_from(dense, heads, cfg.qk_nope_head_dim, cfg.v_head_dim, name)
        key = (CORRECT, None)
        keys[key] = (CORRECT, Reading())
        errors.setdefault(key, {})[rank.rank] = fitted_rel_err(observed, correct)
        wscale = t.get("kv_b_proj.weight_scale_inv")
        if like is None and released:
            # The bytes are gone: test the hypothesis that they were the checkpoint's shard VNNI-packed.
            shard = full.chunk(tp, dim=0)[rank.rank]
            if not can_vnni_pack(tuple(shard.shape), shard.dtype) or (shard.element_size() == 1 and scale_full is None):
                continue
            weight, held = vnni_pack(shard.contiguous(), name="kv_b_proj.weight"), Held(None, vnni=True)
            block_scale = None if scale_full is None else scale_full.chunk(tp, dim=0)[rank.rank]
        elif like is not None:
            layout = byte_relation(
                "kv_b_proj.weight", TensorRole.WEIGHT, "capture", rank.rank, like.tensor, _shard(full, like, tp, rank.rank)
            )
            held_all.append(layout)
            held = _held(layout, None, None)
            weight, block_scale = like.tensor, None if wscale is None else wscale.tensor
        else:
            continue
        if not held.checkpoint_bytes or (weight.element_size() == 1 and block_scale is None):
            continue
        ops = LinearOperands(
            x=torch.empty(0, weight.shape[1]),
            act_scale=None,
            weight=weight,
            weight_scale=block_scale,
            reference_weight=correct,
            out_dtype=torch.float32,
            block=tuple(cfg.weight_block),
        )
        for unshuffles in (0, 1):
            reading = Reading(weight_unshuffles=unshuffles)
            kinds = reading_kinds(reading, held)
            if not kinds or (unshuffles and (held.vnni or ops.weight.shape[0] % 16)):
                continue
            kinds = (StoryKind.DERIVED_FROM_RELAID,) + kinds
            values = weight_values(ops, unshuffles, ScaleLayout.ROW_MAJOR if scale_full is not None else None)
            derived = derived_from(values, heads, cfg.qk_nope_head_dim, cfg.v_head_dim, name)
            key = (kinds, unshuffles)
            keys[key] = (kinds, reading)
            errors.setdefault(key, {})[rank.rank] = fitted_rel_err(observed, derived)
    ranks = [r.rank for r in _ranks(capture)]
    verdicts = judge_ranks(errors, ranks, tolerance)
    candidates = _rank_candidates(errors, keys, ranks)
    return StepExplanation(step, step_outcome(verdicts), candidates, tolerance, name, tuple(held_all), ranks=verdicts)


def _observed(diff: CaptureDiff | None, step: str):
    """The diff's comparison of `step`, or None."""
    if diff is None:
        return None
    return next((s for s in diff.steps if s.step == step), None)


def _source(step: str, capture: Capture, diff: CaptureDiff | None, observed) -> tuple[str | None, DivergenceSource | None]:
    """(the step's input, where its divergence comes from) for a step that is what its inputs give: the
    layer input when the diff says the step differs only by what that input's difference explains; else
    (diverged) its producer when that diverged too, the other side when its input agreed, unknown when
    its input was not compared."""
    held = capture.ranks[0].tensors
    sources = INPUT_SOURCES.get(step, ())
    inherited = next((s for s in sources if s == LAYER_INPUT or f"{s}.output" in held), sources[0] if sources else None)
    if observed is None or observed.verdict not in (StepVerdict.INHERITED, StepVerdict.DIVERGED):
        return inherited, None
    if observed.verdict is StepVerdict.INHERITED:
        return inherited, DivergenceSource.LAYER_INPUT
    if inherited == LAYER_INPUT:
        return inherited, DivergenceSource.OTHER_SIDE  # the layer input's own difference is already taken away
    producer = _observed(diff, inherited)
    if producer is None or producer.verdict in (None, StepVerdict.UNJUDGED):
        return inherited, DivergenceSource.UNKNOWN
    if producer.verdict is StepVerdict.DIVERGED:
        return inherited, DivergenceSource.EARLIER_STEP
    return inherited, DivergenceSource.OTHER_SIDE


def _side_of(capture: Capture, diff: CaptureDiff) -> set[str]:
    """Which sides of `diff` this capture may be (both when they look alike)."""
    me = CaptureSide.of(capture)
    return {side for side, other in (("a", diff.a), ("b", diff.b)) if other == me}


def _truth(capture: Capture, checkpoint: Checkpoint | None, diff: CaptureDiff | None, truth: Truth | None):
    """(the checkpoint to judge by, the truth it is) - see the module docstring; ValueError where the
    result would depend on weights nothing decides between."""
    if checkpoint is not None:
        return checkpoint, truth or Truth(TruthSource.CHECKPOINT)
    decided = diff.truth if diff is not None else None
    if decided is not None and decided.source is TruthSource.UNDECIDED:
        raise ValueError(
            f"explain_capture: the diff's captures hold different {', '.join(decided.disputed)} and no checkpoint "
            "says which are right; pass checkpoint= (the checkpoint the engine loaded)"
        )
    if decided is not None and decided.source in (TruthSource.SIDE_A, TruthSource.SIDE_B):
        if _side_of(capture, diff) != {decided.source.value}:
            raise ValueError(
                f"explain_capture: the diff took side {decided.source.value}'s weights as the checkpoint's; pass "
                "checkpoint= (that capture's .checkpoint(), or the checkpoint the engine loaded)"
            )
    ckpt = own_checkpoint(capture)
    if ckpt is None:
        raise ValueError(
            "explain_capture: the capture's weights are not in checkpoint layout (an engine relaid them); "
            "pass checkpoint= (the checkpoint the engine loaded, e.g. md.Checkpoint.load(path, layer=N))"
        )
    if truth is None:
        agreed = decided is not None and decided.source in (TruthSource.SIDES_AGREE, TruthSource.SIDE_A, TruthSource.SIDE_B)
        truth = decided if agreed else Truth(TruthSource.CAPTURE)
    return ckpt, truth


def _chosen(diff: CaptureDiff | None, steps: list[str] | None) -> list[str]:
    """The steps to explain: those asked for, else the diff's diverged steps and those it could not judge."""
    if steps is not None:
        return list(steps)
    return [s.step for s in diff.steps if s.diverged or s in diff.untested_steps]


def explain_capture(
    capture: Capture,
    checkpoint: Checkpoint | None = None,
    *,
    diff: CaptureDiff | None = None,
    steps: list[str] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    truth: Truth | None = None,
) -> CaptureExplanation:
    """Test the known layout stories on `capture` and rank them (see the module docstring).

    `checkpoint` holds the layer's weights as the engine loaded them (default: the capture's own, when
    it holds them in checkpoint layout - then every verdict assumes them right, `CaptureExplanation.
    truth`). The steps explained are those that diverge in `diff` or that it could not judge (this
    capture is one of its sides; default: the diff against mla_debug's reference run), or `steps`.
    `truth` names where a `checkpoint` passed in comes from when it is not the engine's (a capture's).

    >>> explanation = md.explain_capture(md.load_capture("tp4"), checkpoint=md.load_capture("tp2").checkpoint())
    >>> [(e.step, e.story, e.story_ranks) for e in explanation.stories]
    """
    ckpt, truth = _truth(capture, checkpoint, diff, truth)
    if diff is None and steps is None:
        # The reference run is of the weights judged by, whatever they are: the diff says the same truth.
        diff = replace(diff_captures(capture, reference=True, checkpoint=ckpt), truth=truth)
    explanations = []
    for step in _chosen(diff, steps):
        observed = _observed(diff, step)
        limit = observed.threshold if observed is not None and observed.threshold is not None else tolerance
        if observed is not None and observed.status is StepStatus.UNTESTABLE and step not in STEP_LINEARS and step not in STEP_NORMS:
            found = _untestable(step, limit, observed.untestable)
        elif step in STEP_LINEARS:
            found = explain_linear(step, capture, ckpt, limit)
        elif step in STEP_NORMS:
            found = explain_norm(step, capture, ckpt, limit)
        else:
            found = _untestable(step, limit, Untestable.NOT_RECOMPUTED)
        explanations.append(_with_observed(found, observed, capture, diff, truth))
    for name in DERIVED:
        if name in capture.ranks[0].tensors and DERIVED[name] not in _chosen(diff, steps):
            explanations.append(_with_observed(explain_derived(name, capture, ckpt), None, capture, diff, truth))
    chosen = set(_chosen(diff, steps))
    explanations += [e for e in explain_unrecorded(capture) if e.step not in chosen]
    return CaptureExplanation(tuple(explanations), diff, truth=truth)


def explain_unrecorded(capture: Capture) -> list[StepExplanation]:
    """A step whose weight the engine released after loading (the manifest's `unrecorded`) and never ran
    as a module: untestable, NOT_RECORDED, the detail naming the attention backend."""
    found = []
    for item in capture.manifest.unrecorded:
        module = item.name.partition(".")[0]
        if module in STEP_LINEARS.values() and f"{module}.output" not in capture.ranks[0].tensors:
            found.append(
                StepExplanation(
                    module, Outcome.UNTESTABLE, missing=(item.name,), untestable=Untestable.NOT_RECORDED, detail=item.detail
                )
            )
    return found


def _with_observed(found: StepExplanation, observed, capture: Capture, diff: CaptureDiff | None, truth: Truth):
    """The explanation with what the diff saw of the step, where its divergence comes from, and whether
    the verdict rests on weights nobody vouched for."""
    changes: dict[str, Any] = {"assumes_weights": truth.assumed and found.outcome is not Outcome.UNTESTABLE}
    if observed is not None and observed.status is StepStatus.COMPARED:
        changes.update(observed_rel_err=observed.rel_err, observed_verdict=observed.verdict)
    if found.outcome is Outcome.CORRECT_FROM_INPUTS and found.tensor not in DERIVED:
        inherited, source = _source(found.step, capture, diff, observed)
        changes.update(inherited_from=inherited, source=source)
    return replace(found, **changes)


def load_capture_explanation(path: str | os.PathLike) -> CaptureExplanation:
    """An explanation written by `CaptureExplanation.to_json` (or `mla-debug capture explain --json`)."""
    return CaptureExplanation.load(path)
