"""One configuration (TP size, mode) of a triage as plain data: its verdict, every step's comparison with
the reference, and the kernel each linear got."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..._checks import find
from ...kernels import KernelChoice
from ..diff import StepDiff, worst_step
from ..tables import steps_frame

VERDICTS = ("ok", "diverged")


@dataclass
class RunReport:
    """The run at (`tp`, `mode`) against the reference: `verdict` ("ok" or "diverged"), the first
    divergent step, every step (`StepDiff`, in layer order) and per linear its KernelChoice."""

    tp: int
    mode: str
    verdict: str
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "mode": self.mode,
            "verdict": self.verdict,
            "first_divergent_step": self.first_divergent_step,
            "kernels": {linear: choice.to_dict() for linear, choice in self.kernels.items()},
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        verdict = data["verdict"]
        if verdict not in VERDICTS:
            raise ValueError(f"run TP{data.get('tp')} {data.get('mode')}: verdict {verdict!r} is not one of {VERDICTS}")
        return cls(
            tp=int(data["tp"]),
            mode=str(data["mode"]),
            verdict=verdict,
            first_divergent_step=data.get("first_divergent_step"),
            steps=[StepDiff.from_dict(s) for s in data.get("steps", [])],
            kernels={linear: KernelChoice.from_dict(c) for linear, c in data.get("kernels", {}).items()},
        )
