"""LayerRun: the ordered, gathered StepRecords of one layer forward at one TP size, plus per-rank ones.

`assemble_run` is the one place a LayerRun is made (both executors and the triage's layer cache call
it); the finished run announces itself to active listeners (`parallel.observe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..kernels import KernelChoice
from ..model.records import StepRecord
from .observe import RunDescription, announce


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
    def tokens(self) -> int | None:
        """Tokens in the input: the first dimension of every step's output (None without records)."""
        first = next((r.output for r in self.records.values() if r.output is not None), None)
        return None if first is None else int(first.shape[0])

    @property
    def description(self) -> RunDescription:
        return RunDescription.of(self, self.tp_size, self.mode, self.executor)

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


def describe_kernel(linear) -> KernelChoice:
    """Which kernel the policy chose for a linear at load, and why (KernelChoice.dense() when unquantized)."""
    return linear.kernel_choice


def kernels_of(layer) -> dict[str, KernelChoice]:
    """Linear name -> the kernel chosen for it on one rank layer, and why."""
    return {name: describe_kernel(linear) for name, linear in layer.linears.items()}


def events_of(layer) -> dict[str, list[str]]:
    """Linear name -> its load history (kernel choice, re-layouts, then the behaviour's load-order lines)
    on one rank layer."""
    extra = getattr(layer, "load_events", {})
    return {name: list(linear.events) + list(extra.get(name, ())) for name, linear in layer.linears.items()}


def assemble_run(
    cfg,
    tp_size: int,
    mode: str,
    platform: str,
    scenario: str,
    executor: str,
    records: dict[str, StepRecord],
    per_rank: dict[str, list[StepRecord]],
    kernels: dict[str, KernelChoice],
    events: dict[str, list[str]],
) -> LayerRun:
    """The LayerRun of a finished forward, announced to active listeners."""
    run = LayerRun(
        model=cfg.name,
        tp_size=tp_size,
        mode=mode,
        platform=platform,
        scenario=scenario,
        executor=executor,
        records=records,
        per_rank=per_rank,
        kernels=kernels,
        events=events,
    )
    return announce(run)
