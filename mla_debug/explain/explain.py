"""Explain a capture: `md.explain_capture(capture, checkpoint) -> CaptureExplanation`.

For every step that diverges (from mla_debug's reference run on the same checkpoint and inputs, or in
a given `CaptureDiff`) and every derived weight the engine kept (W_UK, W_UV), the layout stories of
`explain.stories` are computed from the captured tensors of each rank and ranked by how well
they reproduce what the engine produced (relative L2 error, the worst rank's):

- EXPLAINED: a story reproduces the captured output within the step's tolerance and the correct
  computation does not. Its kinds name the broken contracts; the ranking keeps every candidate with
  its error, the evidence the story rests on.
- CORRECT_FROM_INPUTS: the correct computation from the captured inputs reproduces the output: the
  step did its job, and the divergence comes from an earlier step (or is no divergence at all).
  A story that reproduces the output equally well (M == 1, 256-byte rows) is not preferred to it.
- NO_STORY: nothing reproduces the output: no known layout story explains this step.
- UNTESTABLE: the step is not one the stories recompute (rope, attention, the all-reduce), or the
  capture lacks what they need (named in `missing`).

The tolerance of a step is its divergence threshold from the noise floor (`verdict`: max of
DIVERGENCE_FACTOR x floor and MIN_THRESHOLD), or `tolerance` where no floor is known; that of a derived
weight depends on the dtype it is stored in (`DERIVED_TOLERANCE`). Words are made in viz/ and the CLI.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import torch

from .._json_numbers import float_from_json, float_to_json
from ..capture import Capture, CapturedTensor, Shard, TensorRole
from ..kernels.vllm_cpu import VLLM_CLASS as W8A16_VLLM_CLASS
from ..layouts import ScaleLayout, can_vnni_pack, vnni_pack, vnni_unpack
from ..model import Checkpoint
from ..model.norms import rms_norm
from ..numerics import rel_l2
from ..parallel.gather import sum_in_rank_order
from .diff import (
    ByteRelation,
    CaptureDiff,
    RankLayout,
    byte_relation,
    checkpoint_tensor,
    diff_captures,
    known_checkpoint,
)
from .format_stories import linear_format_candidates
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

SCHEMA = 1
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
W8A16_KERNEL = W8A16_VLLM_CLASS


class Outcome(str, Enum):
    EXPLAINED = "explained"
    CORRECT_FROM_INPUTS = "correct_from_inputs"
    NO_STORY = "no_story"
    UNTESTABLE = "untestable"


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
    weight_vnni_unpack: bool = False

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
            weight_vnni_unpack=bool(data.get("weight_vnni_unpack", False)),
        )


@dataclass(frozen=True)
class StepExplanation:
    """The stories tested on one step (or derived weight `tensor`), ranked best first.

    `held` is the forensics of the bytes the step's weight holds on each rank against the checkpoint
    (`capture_diff.RankLayout`); `act_scale_written` the byte order the activation scale was written
    in (from the data); `observed_rel_err` the step's divergence in the diff that selected it.
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

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def story(self) -> tuple[StoryKind, ...]:
        """The kinds of the explaining story; () unless EXPLAINED."""
        return self.best.kinds if self.outcome is Outcome.EXPLAINED and self.best else ()

    @property
    def correct(self) -> Candidate | None:
        return next((c for c in self.candidates if c.is_correct), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "tensor": self.tensor,
            "outcome": self.outcome.value,
            "tolerance": float_to_json(self.tolerance),
            "observed_rel_err": float_to_json(self.observed_rel_err),
            "act_scale_written": None if self.act_scale_written is None else self.act_scale_written.value,
            "held": [h.to_dict() for h in self.held],
            "missing": list(self.missing),
            "candidates": [c.to_dict() for c in self.candidates],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepExplanation:
        written = data.get("act_scale_written")
        return cls(
            step=str(data["step"]),
            outcome=Outcome(data["outcome"]),
            candidates=tuple(Candidate.from_dict(c) for c in data.get("candidates", ())),
            tolerance=float_from_json(data.get("tolerance"), "tolerance"),
            tensor=data.get("tensor"),
            held=tuple(RankLayout.from_dict(h) for h in data.get("held", ())),
            act_scale_written=None if written is None else ScaleLayout(written),
            observed_rel_err=float_from_json(data.get("observed_rel_err"), "observed_rel_err"),
            missing=tuple(data.get("missing", ())),
        )


@dataclass(frozen=True)
class CaptureExplanation:
    """Every explanation of one capture, and the diff that chose the steps."""

    explanations: tuple[StepExplanation, ...]
    diff: CaptureDiff | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def stories(self) -> list[StepExplanation]:
        """The explained steps and derived weights (empty for a clean capture)."""
        return [e for e in self.explanations if e.outcome is Outcome.EXPLAINED]

    @property
    def unexplained(self) -> list[StepExplanation]:
        return [e for e in self.explanations if e.outcome is Outcome.NO_STORY]

    def of(self, step: str) -> StepExplanation:
        for e in self.explanations:
            if e.step == step or e.tensor == step:
                return e
        raise KeyError(f"no explanation for {step!r}; explained: {[e.tensor or e.step for e in self.explanations]}")

    @property
    def table(self):
        """pandas DataFrame, one row per candidate: step, outcome, rank, kinds, rel_err."""
        import pandas as pd  # here: the package works without pandas

        rows = [
            {
                "step": e.step,
                "tensor": e.tensor,
                "outcome": e.outcome.value,
                "rank": c.rank,
                "story": " + ".join(k.value for k in c.kinds),
                "rel_err": c.rel_err,
                "tolerance": e.tolerance,
            }
            for e in self.explanations
            for c in (e.candidates or (None,))
            if c is not None
        ]
        return pd.DataFrame(rows, columns=["step", "tensor", "outcome", "rank", "story", "rel_err", "tolerance"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "schema": SCHEMA,
            "notes": list(self.notes),
            "explanations": [e.to_dict() for e in self.explanations],
            "diff": None if self.diff is None else self.diff.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaptureExplanation:
        if data.get("kind") != KIND or data.get("schema") != SCHEMA:
            raise ValueError(
                f"not a capture explanation of schema {SCHEMA}: kind {data.get('kind')!r}, schema {data.get('schema')!r}"
            )
        diff = data.get("diff")
        return cls(
            explanations=tuple(StepExplanation.from_dict(e) for e in data.get("explanations", ())),
            diff=None if diff is None else CaptureDiff.from_dict(diff),
            notes=tuple(data.get("notes", ())),
        )

    def to_json(self, path: str | os.PathLike) -> Path:
        """Write as JSON, never overwriting (a taken name gets `-2`, `-3`, ...); returns the path written."""
        from .._files import write_atomically

        return write_atomically(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> CaptureExplanation:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err})") from None
        return cls.from_dict(data)


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


def _rank_candidates(results: dict[tuple, list[float]], keys: dict[tuple, tuple]) -> tuple[Candidate, ...]:
    scored = []
    for key, errors in results.items():
        kinds, reading = keys[key]
        worst = max(errors) if errors else math.nan
        scored.append((kinds, reading, worst, tuple(errors)))
    scored.sort(key=lambda s: (math.isnan(s[2]), s[2], len(s[0])))
    return tuple(
        Candidate(
            i + 1, kinds, worst, errors, reading.weight_unshuffles, reading.weight_scale, reading.act_scale,
            reading.weight_vnni_unpack,
        )
        for i, (kinds, reading, worst, errors) in enumerate(scored)
    )


def judge(candidates: tuple[Candidate, ...], tolerance: float) -> Outcome:
    """EXPLAINED, CORRECT_FROM_INPUTS or NO_STORY from ranked candidates (see the module docstring)."""
    correct = next((c for c in candidates if c.is_correct), None)
    if correct is not None and correct.rel_err <= tolerance:
        return Outcome.CORRECT_FROM_INPUTS
    best = candidates[0] if candidates else None
    if best is None or not best.rel_err <= tolerance:
        return Outcome.NO_STORY
    return Outcome.EXPLAINED


def explain_linear(step: str, capture: Capture, ckpt: Checkpoint, tolerance: float) -> StepExplanation:
    """Rank every reading of one linear step's operands on every rank (see `capture_stories`)."""
    module = STEP_LINEARS[step]
    names = (f"{step}.input", f"{step}.output")
    missing = tuple(n for n in names if n not in capture.ranks[0].tensors)
    full = checkpoint_tensor(ckpt, f"{module}.weight")
    if full is None:
        missing += (f"{module}.weight (checkpoint)",)
    if _captured_weight(capture.ranks[0].tensors, module, ".weight") is None:
        missing += (f"{module}.weight",)
    if missing:
        return StepExplanation(step, Outcome.UNTESTABLE, tolerance=tolerance, missing=missing)
    dense_full = _dense(ckpt, module)
    results: dict[tuple, list[float]] = {}
    keys: dict[tuple, tuple] = {}
    outputs: dict[tuple, list[torch.Tensor]] = {}
    observed: list[torch.Tensor] = []
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
            return StepExplanation(
                step, Outcome.UNTESTABLE, tolerance=tolerance, missing=(f"{module}.weight_scale_inv",)
            )
        if x.element_size() == 1 and act is None:
            return StepExplanation(step, Outcome.UNTESTABLE, tolerance=tolerance, missing=(f"{step}.input_scale",))
        rows = x.reshape(-1, x.shape[-1]).shape[0]
        scale_rows = None
        if act is not None and act.tensor.dim() == 2 and act.tensor.shape[0] != rows:
            # A scale handed over whole (its byte order is the evidence, and a misread mixes every token's
            # scales) beside inputs kept for the chosen tokens: read whole, then compared at those rows.
            held_rows, kept = act.tensor.shape[0], tuple(capture.manifest.tokens)
            if len(kept) != rows or not kept or max(kept) >= held_rows:
                missing = (f"{step}.input_scale of the {rows} kept tokens (it holds {held_rows} rows)",)
                return StepExplanation(step, Outcome.UNTESTABLE, tolerance=tolerance, missing=missing)
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
        observed.append(out.reshape(ops.x.shape[0], -1))
        for reading in linear_readings(ops, held):
            kinds = reading_kinds(reading, held) or (StoryKind.CORRECT,)
            key = (kinds, reading.weight_unshuffles, reading.weight_scale, reading.act_scale, reading.weight_vnni_unpack)
            keys[key] = (kinds, reading)
            outputs.setdefault(key, []).append(compute_reading(ops, reading, held))
        if held.shuffles == 0:
            # Scale representation stories (`capture_format_stories`) on the plain bytes.
            intended = (
                None if scale_full is None else _shard(scale_full, t.get(f"{module}.weight_scale_inv"), tp, rank.rank)
            )
            for kinds, y in linear_format_candidates(ops, intended):
                key = (kinds, "format")
                keys[key] = (kinds, Reading())
                outputs.setdefault(key, []).append(y)
    reduced = _reduced_in_module(capture, step, module)
    for key, per_rank in outputs.items():
        if len(per_rank) != len(observed):
            continue  # a story must hold on every rank
        if reduced:
            # The engine's module all-reduced its row-parallel output: compare the sum of the ranks' products.
            total = sum_in_rank_order(per_rank).to(per_rank[0].dtype)
            results[key] = [rel_l2(total, observed[0])]
        else:
            results[key] = [rel_l2(y, o) for y, o in zip(per_rank, observed)]
    candidates = _rank_candidates(results, keys)
    written = next(iter(written_all)) if len(written_all) == 1 else None
    return StepExplanation(
        step, judge(candidates, tolerance), candidates, tolerance, f"{module}.weight", tuple(held_all), written
    )


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
        return StepExplanation(step, Outcome.UNTESTABLE, tolerance=tolerance, missing=missing)
    errors = []
    weight = ckpt.norm_weight(step)
    for rank in _ranks(capture):
        x, out = rank.tensors[names[0]].tensor, rank.tensors[names[1]].tensor
        expected = rms_norm(x.to(torch.float32), weight.to(torch.float32), ckpt.cfg.rms_norm_eps).to(out.dtype)
        errors.append(rel_l2(expected, out))
    candidate = Candidate(1, (StoryKind.CORRECT,), max(errors), tuple(errors))
    return StepExplanation(step, judge((candidate,), tolerance), (candidate,), tolerance, f"{step}.weight")


def explain_derived(name: str, capture: Capture, ckpt: Checkpoint) -> StepExplanation:
    """W_UK / W_UV as kept by the engine against their derivation from the checkpoint's kv_b_proj
    values and from the captured kv_b_proj bytes read directly. A derived weight the engine keeps
    VNNI-packed (attrs layout "vnni") is un-packed first; where the engine released kv_b_proj after
    deriving (the manifest's `unrecorded`), the story tested is the checkpoint's bytes VNNI-packed and
    read directly (vLLM CPU's guard on kv_b_proj dropped)."""
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
    results: dict[tuple, list[float]] = {}
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
        key = ((StoryKind.CORRECT,), None)
        keys[key] = ((StoryKind.CORRECT,), Reading())
        results.setdefault(key, []).append(fitted_rel_err(observed, correct))
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
            results.setdefault(key, []).append(fitted_rel_err(observed, derived))
    # A story must hold on every rank: drop candidates some rank could not compute.
    complete = {k: v for k, v in results.items() if len(v) == len(capture.ranks)}
    candidates = _rank_candidates(complete, keys)
    return StepExplanation(step, judge(candidates, tolerance), candidates, tolerance, name, tuple(held_all))


def explain_unrecorded(capture: Capture) -> list[StepExplanation]:
    """A step whose weight the engine released after loading (the manifest's `unrecorded`): untestable,
    saying why and under which attention backend."""
    found = []
    for item in capture.manifest.unrecorded:
        module, _, _ = item.name.partition(".")
        if module in STEP_LINEARS.values() and f"{module}.output" not in capture.ranks[0].tensors:
            found.append(StepExplanation(module, Outcome.UNTESTABLE, missing=(f"{item.name}: {item.detail}",)))
    return found


def _tolerance(diff: CaptureDiff | None, step: str, default: float) -> tuple[float, float | None]:
    if diff is not None:
        for s in diff.steps:
            if s.step == step:
                return (s.threshold if s.threshold is not None else default), s.rel_err
    return default, None


def explain_capture(
    capture: Capture,
    checkpoint: Checkpoint | None = None,
    *,
    diff: CaptureDiff | None = None,
    steps: list[str] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> CaptureExplanation:
    """Test the known layout stories on `capture` and rank them (see the module docstring).

    `checkpoint` holds the layer's weights as the engine loaded them (default: the capture's own, when
    it holds them in checkpoint layout). The steps explained are those that diverge in `diff` (whose
    side b must be this capture; default: the diff against mla_debug's reference run), or `steps`.

    >>> explanation = md.explain_capture(md.load_capture("tp4"), checkpoint=md.load_capture("tp2").checkpoint())
    >>> [(e.step, e.story) for e in explanation.stories]
    """
    ckpt = known_checkpoint(capture, capture, checkpoint)
    if ckpt is None:
        raise ValueError(
            "explain_capture: the capture's weights are not in checkpoint layout (an engine relaid them); "
            "pass checkpoint= (the checkpoint the engine loaded, e.g. md.Checkpoint.load(path, layer=N))"
        )
    if diff is None and steps is None:
        diff = diff_captures(capture, reference=True, checkpoint=ckpt)
    chosen = list(steps) if steps is not None else diff.diverged_steps
    explanations = []
    for step in chosen:
        limit, observed = _tolerance(diff, step, tolerance)
        if step in STEP_LINEARS:
            found = explain_linear(step, capture, ckpt, limit)
        elif step in STEP_NORMS:
            found = explain_norm(step, capture, ckpt, limit)
        else:
            found = StepExplanation(step, Outcome.UNTESTABLE, tolerance=limit)
        explanations.append(_with_observed(found, observed))
    for name in DERIVED:
        if name in capture.ranks[0].tensors and DERIVED[name] not in chosen:
            explanations.append(explain_derived(name, capture, ckpt))
    explanations += [e for e in explain_unrecorded(capture) if e.step not in chosen]
    return CaptureExplanation(tuple(explanations), diff)


def _with_observed(found: StepExplanation, observed: float | None) -> StepExplanation:
    from dataclasses import replace

    return replace(found, observed_rel_err=observed)


def load_capture_explanation(path: str | os.PathLike) -> CaptureExplanation:
    """An explanation written by `CaptureExplanation.to_json` (or `mla-debug capture explain --json`)."""
    return CaptureExplanation.load(path)
