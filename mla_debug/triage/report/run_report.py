"""One configuration (TP size, mode) of a triage as plain data: its verdict, every step's comparison with
the reference, and the kernel each linear got."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..._checks import find
from ..._json_records import JsonRecord
from ...kernels import KernelChoice
from ..diff import StepDiff, worst_step
from ..tables import steps_frame

Verdict = Literal["ok", "diverged"]


@dataclass
class RunReport(JsonRecord):
    """The run at (`tp`, `mode`) against the reference: `verdict` ("ok" or "diverged"), the first
    divergent step, every step (`StepDiff`, in layer order) and per linear its KernelChoice."""

    tp: int
    mode: str
    verdict: Verdict
    first_divergent_step: str | None
    steps: list[StepDiff]
    kernels: dict[str, KernelChoice] = field(default_factory=dict)

    @classmethod
    def of(cls, config) -> RunReport:
        """The plain part of a triage's ConfigResult (its RunDiff's steps; no tensors)."""
        diff = config.diff
        return cls(
            tp=config.tp,
            mode=config.mode,
            verdict=config.verdict,
            first_divergent_step=diff.first_divergent_step,
            steps=list(diff.steps),
            kernels=dict(diff.run.kernels),
        )

    @property
    def diverged(self) -> bool:
        return self.verdict == "diverged"

    @property
    def label(self) -> tuple[int, str]:
        return (self.tp, self.mode)

    @property
    def first_divergent(self) -> StepDiff | None:
        return next((s for s in self.steps if s.name == self.first_divergent_step), None)

    @property
    def worst(self) -> StepDiff | None:
        return worst_step(self.steps)

    def step(self, name: str) -> StepDiff:
        return find(self.steps, lambda s: s.name, name, f"TP{self.tp} {self.mode}: no step {name!r}", "steps:")

    @property
    def table(self):
        """pandas DataFrame, one row per step (the same table as the live `RunDiff.table`)."""
        return steps_frame(self.steps)
