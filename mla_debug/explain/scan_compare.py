"""`md.compare_scans(a, b)`: the first decoder layer whose divergence its own input does not explain.

Two scans of one model on the same tokens (say TP2, fine, and TP4, garbage) are compared step by step,
layer by layer, on their summaries (`capture.scan_types`): each step's relative difference of b against
a (the column sample of every kept token, the per-token norms and the kept whole rows; the largest of
them) is judged against what its inputs explain, by the divergence rule the capture diff and triage use
(`threshold`: DIVERGENCE_FACTOR x floor, at least MIN_THRESHOLD), where a step's floor is

    explained = GAIN x (its input's relative difference) + ROUNDING_UNITS x (unit roundoff of its dtype)

- the difference it inherits, amplified as much as a correct step may, plus what a correct step adds by
rounding its own sums in another order (another TP size sums partial products in another order). The
inputs are: for a layer's input, the previous layer's output (the same tensor; the first layer's input,
the embeddings, must match exactly); for the attention input, the layer input (the input norm); for the
attention output, the attention input; for the layer output, the layer input and the attention output
(their absolute differences added: the residual stream carries both into the MLP and its sum).

A step whose difference stays within that is INHERITED when its input already differed (the inherited
difference is shown as such) and SAME otherwise; one that exceeds it is DIVERGED: the divergence starts
there. A clean pair (TP2 vs TP4 in bf16, whose sums already differ) gets no DIVERGED step; the first
DIVERGED layer is the one to capture whole, and `capture_call` says how.

The constants are data with their reasons: GAIN 2 (a norm, a linear map or attention passes a small
relative input difference on at about its own size: on a clean TP2-vs-TP4 pair of transformers'
DeepSeek-V3 in bf16 the largest ratio of a step's difference to its input's was 1.7, tests/scan),
ROUNDING_UNITS 4 (the same pair differs by at most 2.3 unit roundoffs at any step of its five layers,
about one per rounding). With DIVERGENCE_FACTOR 4 on top, a bf16 step whose input matches must differ by
more than 6% to diverge: a weight read in the wrong layout differs by 100% or more. MoE layers can route a
token to other experts when its input differs in the last bits; such a layer output differs on a few
tokens only, which `ScanStepComparison.tokens_over` shows (transformers' dense test model has none).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import torch

from .._checks import find
from .._json_records import JsonRecord
from ..capture.scan_store import load_scan
from ..capture.scan_types import GatheredSummary, Scan, ScanStep, gather_summary
from ..verdict import DIVERGENCE_FACTOR, threshold
from .document import JsonDocument, check_document

SCHEMA = 1
KIND = "scan-comparison"
GAIN = 2.0
ROUNDING_UNITS = 4.0
# Unit roundoff (half the spacing of 1.0) of the dtypes activations are kept in.
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}
# How many kept tokens a suggested capture keeps at most.
CAPTURE_TOKENS = 16


class StepOutcome(str, Enum):
    AGREES = "agrees"  # within its own rounding floor
    INHERITED = "inherited"  # differs, within what its input's difference explains
    DIVERGED = "diverged"  # differs beyond what its inputs explain: the divergence starts here
    UNJUDGED = "unjudged"  # a side lacks the summary, or the summaries cannot be compared


@dataclass(frozen=True)
class ScanStepComparison(JsonRecord):
    """One step of one layer: b's difference against a, and what its inputs explain.

    `rel_err` is the largest of `column_err` (the column sample of every kept token), `norm_err` (the
    per-token norms; NaN for a partial sum) and `row_err` (the kept whole rows). `input_steps` are the
    steps it is judged against and `input_err` their (relative) difference; `explained` its floor and
    `threshold` the divergence line. `token_errors` are per kept token (column sample), `tokens_over` the
    kept tokens whose own error passes the threshold; `rank_errors` b's ranks' own copies of a replicated
    tensor against a's, `disagreeing_ranks` the ranks of a side ("a1", "b3") whose copy's bytes differ
    from its rank 0's.
    """

    layer: int
    step: ScanStep
    outcome: StepOutcome
    rel_err: float = math.nan
    column_err: float = math.nan
    norm_err: float = math.nan
    row_err: float = math.nan
    input_steps: tuple[str, ...] = ()
    input_err: float | None = None
    explained: float | None = None
    threshold: float | None = None
    token_errors: tuple[float, ...] = ()
    tokens_over: tuple[int, ...] = ()
    rank_errors: tuple[float, ...] = ()
    disagreeing_ranks: tuple[str, ...] = ()
    nonfinite: tuple[int, int] = (0, 0)
    note: str = ""

    @property
    def diverged(self) -> bool:
        return self.outcome is StepOutcome.DIVERGED


@dataclass(frozen=True)
class LayerComparison:
    """One decoder layer: its steps in order, and the worst outcome among them."""

    layer: int
    steps: tuple[ScanStepComparison, ...]

    @property
    def outcome(self) -> StepOutcome:
        outcomes = {s.outcome for s in self.steps}
        for outcome in (StepOutcome.DIVERGED, StepOutcome.INHERITED, StepOutcome.UNJUDGED):
            if outcome in outcomes:
                return outcome
        return StepOutcome.AGREES

    @property
    def first_diverged(self) -> ScanStepComparison | None:
        return next((s for s in self.steps if s.diverged), None)

    def step(self, step: ScanStep | str) -> ScanStepComparison:
        wanted = ScanStep(step)
        for s in self.steps:
            if s.step is wanted:
                return s
        raise KeyError(f"layer {self.layer} has no step {wanted.value}")


@dataclass(frozen=True)
class ScanSide(JsonRecord):
    """What identifies one side of a scan comparison (no tensors)."""

    engine: str
    engine_version: str | None
    tp_size: int
    layers: int
    tokens: int
    path: str
    note: str

    @classmethod
    def of(cls, scan: Scan) -> ScanSide:
        m = scan.manifest
        return cls(m.engine, m.engine_version, m.tp_size, len(m.layers), len(m.tokens), scan.path, m.note)


@dataclass(frozen=True)
class ScanComparison(JsonDocument):
    """b's scan against a's, layer by layer (see the module docstring)."""

    a: ScanSide
    b: ScanSide
    layers: tuple[LayerComparison, ...]
    gain: float = GAIN
    rounding_units: float = ROUNDING_UNITS
    factor: float = DIVERGENCE_FACTOR
    capture_call: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def first_divergent(self) -> ScanStepComparison | None:
        """The first step, in layer order, whose difference its inputs do not explain (None: none)."""
        for layer in self.layers:
            found = layer.first_diverged
            if found is not None:
                return found
        return None

    @property
    def first_divergent_layer(self) -> int | None:
        found = self.first_divergent
        return None if found is None else found.layer

    @property
    def diverged_layers(self) -> list[int]:
        return [layer.layer for layer in self.layers if layer.outcome is StepOutcome.DIVERGED]

    def layer(self, index: int) -> LayerComparison:
        return find(self.layers, lambda x: x.layer, index, f"no layer {index} in the comparison", "layers:")

    @property
    def table(self):
        """pandas DataFrame, one row per (layer, step)."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "layer": s.layer,
                    "step": s.step.value,
                    "outcome": s.outcome.value,
                    "rel_err": s.rel_err,
                    "input_err": s.input_err,
                    "explained": s.explained,
                    "threshold": s.threshold,
                    "tokens_over": len(s.tokens_over),
                }
                for layer in self.layers
                for s in layer.steps
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "schema": SCHEMA,
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "gain": self.gain,
            "rounding_units": self.rounding_units,
            "factor": self.factor,
            "capture_call": self.capture_call,
            "notes": list(self.notes),
            "layers": [{"layer": layer.layer, "steps": [s.to_dict() for s in layer.steps]} for layer in self.layers],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScanComparison:
        check_document(data, KIND, (SCHEMA,), "scan comparison")
        return cls(
            a=ScanSide.from_dict(data["a"]),
            b=ScanSide.from_dict(data["b"]),
            layers=tuple(
                LayerComparison(int(x["layer"]), tuple(ScanStepComparison.from_dict(s) for s in x["steps"]))
                for x in data["layers"]
            ),
            gain=float(data["gain"]),
            rounding_units=float(data["rounding_units"]),
            factor=float(data["factor"]),
            capture_call=data.get("capture_call"),
            notes=tuple(data.get("notes", ())),
        )


# -- measuring ---------------------------------------------------------------------------------------


def _rel(diff: torch.Tensor, ref: torch.Tensor) -> float:
    num, den = float(torch.linalg.vector_norm(diff)), float(torch.linalg.vector_norm(ref))
    if not math.isfinite(num):
        return math.inf
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


@dataclass(frozen=True)
class _Measured:
    rel: float
    columns: float
    norms: float
    rows: float
    abs_columns: float
    ref_columns: float
    per_token: tuple[float, ...]
    rank_errors: tuple[float, ...]


def _measure(x: GatheredSummary, y: GatheredSummary) -> _Measured:
    columns = _rel(y.columns - x.columns, x.columns)
    norms = _rel(y.token_norms - x.token_norms, x.token_norms) if x.token_norms is not None and y.token_norms is not None else math.nan
    rows = _rel(y.rows - x.rows, x.rows) if x.rows.numel() and x.rows.shape == y.rows.shape else math.nan
    per_token = tuple(_rel(y.columns[t] - x.columns[t], x.columns[t]) for t in range(x.columns.shape[0]))
    ranks = tuple(_rel(c - x.columns, x.columns) for c in y.per_rank_columns) if y.shard.value == "replicated" else ()
    finite = [e for e in (columns, norms, rows, *ranks) if not math.isnan(e)]
    return _Measured(
        rel=max(finite) if finite else math.nan,
        columns=columns,
        norms=norms,
        rows=rows,
        abs_columns=float(torch.linalg.vector_norm(y.columns - x.columns)),
        ref_columns=float(torch.linalg.vector_norm(x.columns)),
        per_token=per_token,
        rank_errors=ranks,
    )


def _disagreeing(side: str, summary: GatheredSummary) -> tuple[str, ...]:
    if summary.shard.value != "replicated":
        return ()
    return tuple(f"{side}{r}" for r, digest in enumerate(summary.checksums) if digest != summary.checksums[0])


def _compatible(a: Scan, b: Scan) -> list[str]:
    ma, mb = a.manifest, b.manifest
    if ma.tokens != mb.tokens:
        raise ValueError(
            f"compare_scans: the scans kept other token rows ({list(ma.tokens)[:8]}... vs {list(mb.tokens)[:8]}...); "
            "scan both on the same inputs with the same tokens="
        )
    if ma.columns != mb.columns or ma.row_tokens != mb.row_tokens:
        raise ValueError("compare_scans: the scans sampled other columns or rows (columns=/rows= must match)")
    notes = []
    only_a, only_b = sorted(set(ma.layers) - set(mb.layers)), sorted(set(mb.layers) - set(ma.layers))
    if only_a or only_b:
        notes.append(f"layers only in a: {only_a}; only in b: {only_b} (compared: the layers both scanned)")
    if ma.model_type != mb.model_type:
        notes.append(f"the scans name other model types ({ma.model_type} vs {mb.model_type})")
    return notes


# -- judging -----------------------------------------------------------------------------------------


def compare_scans(a: Scan | str | os.PathLike, b: Scan | str | os.PathLike, *, gain: float = GAIN,
                  rounding_units: float = ROUNDING_UNITS, factor: float = DIVERGENCE_FACTOR) -> ScanComparison:
    """Compare scan `b` (under test) with scan `a` (the baseline), layer by layer; see the module
    docstring. Each is a `Scan` or its folder (read with `capture.load_scan`).

    >>> cmp = md.compare_scans("scans/tp2", "scans/tp4")
    >>> cmp.first_divergent_layer, cmp.capture_call
    """
    a, b = (side if isinstance(side, Scan) else load_scan(side) for side in (a, b))
    for label, value in (("gain", gain), ("rounding_units", rounding_units), ("factor", factor)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"compare_scans: {label} must be a positive number, got {value!r}")
    notes = _compatible(a, b)
    layers = [i for i in a.manifest.layers if i in set(b.manifest.layers)]
    measured: dict[tuple[int, ScanStep], _Measured] = {}
    results = []
    for position, index in enumerate(layers):
        steps = []
        for step in ScanStep:
            x, y = gather_summary(a, index, step), gather_summary(b, index, step)
            if x is None or y is None:
                steps.append(ScanStepComparison(index, step, StepOutcome.UNJUDGED, note="a side did not record it"))
                continue
            if x.features != y.features:
                steps.append(
                    ScanStepComparison(index, step, StepOutcome.UNJUDGED, note=f"{x.features} vs {y.features} features")
                )
                continue
            m = _measure(x, y)
            if x.nonfinite != y.nonfinite:
                m = replace(m, rel=math.inf)
            measured[(index, step)] = m
            previous = layers[position - 1] if position else None
            steps.append(_judge(index, step, m, x, y, measured, previous, gain, rounding_units, factor))
        results.append(LayerComparison(index, tuple(steps)))
    comparison = ScanComparison(
        a=ScanSide.of(a), b=ScanSide.of(b), layers=tuple(results), gain=gain, rounding_units=rounding_units,
        factor=factor, notes=tuple(notes),
    )
    first = comparison.first_divergent
    if first is None:
        return comparison
    call = suggested_capture(b, first)
    return ScanComparison(**{**comparison.__dict__, "capture_call": call})


def _judge(layer, step, m, x, y, measured, previous, gain, rounding_units, factor) -> ScanStepComparison:
    own = rounding_units * UNIT_ROUNDOFF.get(y.dtype, UNIT_ROUNDOFF["float32"])
    note = ""
    if step is ScanStep.LAYER_INPUT:
        before = measured.get((previous, ScanStep.LAYER_OUTPUT)) if previous == layer - 1 else None
        if before is not None:
            inputs, input_err, explained = (f"L{previous}.layer.output",), before.rel, before.rel
        elif previous is None and layer == 0:
            inputs, input_err, explained = (), None, 0.0
            note = "the first layer's input (the embeddings) must match exactly"
        else:
            inputs, input_err, explained = (), None, None
            note = "the layers before it were not scanned: its difference is taken as given"
    elif step is ScanStep.LAYER_OUTPUT:
        stream, attention = measured.get((layer, ScanStep.LAYER_INPUT)), measured.get((layer, ScanStep.ATTN_OUTPUT))
        inputs = (f"L{layer}.layer.input", f"L{layer}.attn.output")
        if stream is None or attention is None or m.ref_columns == 0:
            input_err, explained = None, None
            note = "its inputs were not both compared"
        else:
            input_err = (stream.abs_columns + attention.abs_columns) / m.ref_columns
            explained = gain * input_err + own
    else:
        source = ScanStep.LAYER_INPUT if step is ScanStep.ATTN_INPUT else ScanStep.ATTN_INPUT
        before = measured.get((layer, source))
        inputs = (f"L{layer}.{source.value}",)
        input_err = None if before is None else before.rel
        explained = None if before is None else gain * before.rel + own
    limit = None if explained is None else threshold(explained, factor)
    if not math.isfinite(m.rel):
        outcome = StepOutcome.DIVERGED
    elif limit is None:
        outcome = StepOutcome.INHERITED if m.rel > threshold(own, factor) else StepOutcome.AGREES
    elif m.rel > limit:
        outcome = StepOutcome.DIVERGED
    elif m.rel > threshold(own, factor):
        outcome = StepOutcome.INHERITED
    else:
        outcome = StepOutcome.AGREES
    over = tuple(t for t, e in enumerate(m.per_token) if limit is not None and e > limit)
    return ScanStepComparison(
        layer=layer,
        step=step,
        outcome=outcome,
        rel_err=m.rel,
        column_err=m.columns,
        norm_err=m.norms,
        row_err=m.rows,
        input_steps=inputs,
        input_err=input_err,
        explained=explained,
        threshold=limit,
        token_errors=m.per_token,
        tokens_over=over,
        rank_errors=m.rank_errors,
        disagreeing_ranks=_disagreeing("a", x) + _disagreeing("b", y),
        nonfinite=(x.nonfinite, y.nonfinite),
        note=note,
    )


def suggested_capture(scan: Scan, first: ScanStepComparison) -> str:
    """The call that captures the first diverged layer whole, in the scanned engine's recipe: the kept
    tokens that diverge most (at most CAPTURE_TOKENS of them)."""
    m = scan.manifest
    order = sorted(range(len(m.tokens)), key=lambda t: -first.token_errors[t] if t < len(first.token_errors) else 0)
    tokens = sorted(m.tokens[t] for t in order[:CAPTURE_TOKENS])
    out = f"captures/layer{first.layer}-tp{m.tp_size}"
    if m.engine == "vllm":
        return (
            # The recipe's worker extension (LLM(..., worker_extension_cls=capture.engines.VLLM_EXTENSION)):
            # collective_rpc reaches its methods by name.
            f'llm.collective_rpc("mla_debug_start_capture", kwargs={{"out": "{out}", "layer": {first.layer}, "tokens": {tokens}}})\n'
            "llm.generate(prompts, SamplingParams(max_tokens=1))  # the same prompts as the scan\n"
            'llm.collective_rpc("mla_debug_finish_capture")'
        )
    return (
        f'with md.capture(model, "{out}", layer={first.layer}, tokens={tokens}), torch.no_grad():\n'
        "    model(input_ids)  # the same inputs as the scan"
    )


def load_scan_comparison(path: str | os.PathLike) -> ScanComparison:
    """A comparison written by `ScanComparison.to_json` (or `mla-debug scan compare --json`)."""
    return ScanComparison.load(path)
