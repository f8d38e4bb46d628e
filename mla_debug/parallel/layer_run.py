"""LayerRun: the ordered, gathered StepRecords of one layer forward at one TP size, plus per-rank ones."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..kernels import KernelChoice
from ..model.records import StepRecord


@dataclass
class LayerRun:
    """One layer forward: gathered `records` in step order, `per_rank` records, and per linear the
    kernel chosen for it and why (`kernels`, KernelChoice) and its load history (`events`)."""

    model: str
    tp_size: int
    mode: str
    platform: str
    scenario: str
    executor: str
    records: dict[str, StepRecord]
    per_rank: dict[str, list[StepRecord]] = field(default_factory=dict)
    kernels: dict[str, KernelChoice] = field(default_factory=dict)
    events: dict[str, list[str]] = field(default_factory=dict)

    @property
    def output(self) -> torch.Tensor:
        """The layer output (tokens, hidden) after the all-reduce."""
        return self.records["all_reduce"].output

    @property
    def step_names(self) -> list[str]:
        return list(self.records)

    @property
    def violations(self):
        return [v for record in self.records.values() for v in record.violations]

    def summary(self) -> str:
        head = f"{self.model} TP{self.tp_size} {self.mode} on {self.platform} under {self.scenario} ({self.executor})"
        return "\n".join([head] + [f"  {record.summary()}" for record in self.records.values()])

    def __repr__(self) -> str:
        return f"<LayerRun {self.model} TP{self.tp_size} {self.mode} {self.scenario}: {len(self.records)} steps>"
