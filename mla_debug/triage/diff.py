"""Step-by-step comparison of a layer run with its reference: `md.compare(run, reference) -> RunDiff`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from .._checks import find
from .._json_numbers import float_from_json, float_to_json
from ..kernels import KernelChoice
from ..layouts import ContractViolation, ScaleRead, ViolationKind, WeightLayout
from ..model.program import STEP_LINEARS
from ..model.records import StepStats
from ..verdict.measures import closeness, measures_from_json, measures_to_json
from ..verdict.rule import DIVERGENCE_FACTOR, verdict_of

# What each broken contract means, in words (the classification of a divergent step).
CLASSIFICATION = {
    ViolationKind.SCALE_ORDER: "scale order misread",
    ViolationKind.RELAID_WEIGHT_DIRECT_READ: "weight relaid under a direct reader",
    ViolationKind.DOUBLE_SHUFFLE: "weight shuffled twice",
    ViolationKind.WEIGHT_LAYOUT_MISMATCH: "weight read in another layout than it holds",
    ViolationKind.CONSUMERS_DISAGREE: "consumers of one pre-quantized tensor disagree on its scale order",
}


@dataclass
class StepDiff:
    """One step of a run against the same step of its reference: plain data, no tensors.

    ``kernel``/``reference_kernel`` name the kernels that ran; ``selection`` is why the step's linear got
    its kernel at load (None for a step without a linear). ``scale_layout`` and ``weight_layout`` are
    the layouts the step consumed (see StepRecord). Errors are relative L2, max |a - b|, cosine and
    SNR of the whole output; ``floor``/``threshold`` the step's yardsticks (None without a noise floor);
    ``stats`` the run output's amax and NaN/Inf counts.
    """

    name: str
    kernel: str | None
    reference_kernel: str | None
    scale_layout: ScaleRead | None
    weight_layout: WeightLayout | None
    violations: list[ContractViolation]
    rel_err: float
    max_abs: float
    cosine: float
    snr_db: float
    floor: float | None
    threshold: float | None
    diverged: bool
    classification: str
    selection: KernelChoice | None = None
    stats: StepStats | None = None

    @property
    def effective_violations(self) -> list[ContractViolation]:
        return [v for v in self.violations if v.effective]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (`from_dict` gives an equal StepDiff back; NaN/Inf spelled as strings)."""
        stats = self.stats
        return {
            "name": self.name,
            "kernel": self.kernel,
            "reference_kernel": self.reference_kernel,
            "selection": self.selection.to_dict() if self.selection is not None else None,
            "scale_layout": self.scale_layout.to_dict() if self.scale_layout is not None else None,
            "weight_layout": self.weight_layout.to_dict() if self.weight_layout is not None else None,
            "violations": [v.to_dict() for v in self.violations],
            "rel_err": float_to_json(self.rel_err),
            **measures_to_json(self),
            "classification": self.classification,
            "stats": None if stats is None else {"amax": float_to_json(stats.amax), "nan": stats.nan, "inf": stats.inf},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepDiff:
        name = data["name"]

        def number(key: str) -> float:
            value = float_from_json(data.get(key), f"step {name}: {key}")
            return math.nan if value is None else value

        stats = data.get("stats")
        selection, scale, weight = data.get("selection"), data.get("scale_layout"), data.get("weight_layout")
        return cls(
            name=name,
            kernel=data.get("kernel"),
            reference_kernel=data.get("reference_kernel"),
            selection=KernelChoice.from_dict(selection) if selection is not None else None,
            scale_layout=ScaleRead.from_dict(scale) if scale is not None else None,
            weight_layout=WeightLayout.from_dict(weight) if weight is not None else None,
            violations=[ContractViolation.from_dict(v) for v in data.get("violations", [])],
            rel_err=number("rel_err"),
            **measures_from_json(data, f"step {name}"),
            classification=str(data.get("classification", "")),
            stats=None if stats is None else _stats_from_json(stats, name),
        )


def _stats_from_json(data: dict[str, Any], step: str) -> StepStats:
    amax = float_from_json(data.get("amax"), f"step {step}: stats.amax")
    return StepStats(amax=math.nan if amax is None else amax, nan=int(data.get("nan", 0)), inf=int(data.get("inf", 0)))


def worst_step(steps) -> StepDiff | None:
    """The step with the largest error: among the finite ones when there are any, else a non-finite one."""
    scored = [s for s in steps if math.isfinite(s.rel_err)] or list(steps)
    return max(scored, key=lambda s: s.rel_err if math.isfinite(s.rel_err) else math.inf, default=None)


@dataclass
class RunDiff:
    """Per-step errors of `run` against `reference` (same steps, TP-independent shapes)."""

    run: object
    reference: object
    steps: list[StepDiff] = field(default_factory=list)

    @property
    def first_divergent(self) -> StepDiff | None:
        return next((s for s in self.steps if s.diverged), None)

    @property
    def first_divergent_step(self) -> str | None:
        step = self.first_divergent
        return step.name if step else None

    @property
    def worst(self) -> StepDiff | None:
        return worst_step(self.steps)

    @property
    def diverged(self) -> bool:
        return any(s.diverged for s in self.steps)

    def step(self, name: str) -> StepDiff:
        return find(self.steps, lambda s: s.name, name, f"no step {name!r}", "steps:")

    @property
    def table(self):
        """pandas DataFrame, one row per step (see `triage.tables.steps_frame`)."""
        from .tables import steps_frame

        return steps_frame(self.steps)


def classify(diverged: bool, violations: list[ContractViolation], rel_err: float) -> str:
    effective = [v for v in violations if v.effective]
    if effective:
        return "; ".join(dict.fromkeys(CLASSIFICATION[v.kind] for v in effective))
    if not math.isfinite(rel_err):
        return "non-finite values"
    if diverged:
        return "diverged without a broken contract at this step (inherited from an earlier step)"
    if violations:
        return "quantization noise only (a contract is broken but the bytes read coincide)"
    return "quantization noise only"


def compare(run, reference, floor: dict[str, float] | None = None, factor: float = DIVERGENCE_FACTOR) -> RunDiff:
    """Compare every step of `run` with the same step of `reference`.

    `floor` (per-step FP8 noise of a correct run, from `verdict.step_floor`) sets each step's
    divergence threshold, max(factor x floor, 1e-3); without it only contract violations and
    non-finite values mark a step as diverged.
    """
    diff = RunDiff(run=run, reference=reference)
    for name, record in run.records.items():
        ref = reference.records.get(name)
        if ref is None or record.output is None or ref.output is None:
            continue
        a, b = record.output, ref.output
        err, step_floor, limit, diverged = verdict_of(name, record, ref, floor, factor)
        diff.steps.append(
            StepDiff(
                name=name,
                kernel=record.kernel,
                reference_kernel=ref.kernel,
                scale_layout=record.scale_layout,
                weight_layout=record.weight_layout,
                violations=list(record.violations),
                rel_err=err,
                **closeness(a, b),
                floor=step_floor,
                threshold=limit,
                diverged=diverged,
                classification=classify(diverged, record.violations, err),
                selection=run.kernels.get(STEP_LINEARS.get(name, "")),
                stats=record.stats,
            )
        )
    return diff


def block_errors(run_output: torch.Tensor, reference_output: torch.Tensor, block: int = 128) -> torch.Tensor:
    """(tokens, ceil(D/block)) relative L2 error per token and 128-column block (aligned to the quant
    blocks): where in the output a misread scale or weight lands."""
    a = run_output.detach().to(torch.float64).reshape(run_output.shape[0], -1)
    b = reference_output.detach().to(torch.float64).reshape(reference_output.shape[0], -1)
    pad = (-a.shape[1]) % block
    if pad:
        a = torch.nn.functional.pad(a, (0, pad))
        b = torch.nn.functional.pad(b, (0, pad))
    a = a.view(a.shape[0], -1, block)
    b = b.view(b.shape[0], -1, block)
    num = torch.linalg.vector_norm(a - b, dim=-1)
    den = torch.linalg.vector_norm(b, dim=-1)
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.where(num > 0, math.inf, 0.0)).to(torch.float32)
