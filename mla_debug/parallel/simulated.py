"""In-process executor: every rank of one TP group runs in this process, in lock step, op by op."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from ..model.program import RankLayer
from ..model.records import StepRecord
from .gather import sum_in_rank_order
from .hooks import HookTable
from .loop import run_steps
from .observe import StepObserver


def run_lockstep(
    layers: Sequence[RankLayer],
    hidden: torch.Tensor,
    positions: torch.Tensor,
    mode: str,
    hooks: HookTable | None = None,
    observers: Sequence[StepObserver] = (),
) -> Iterator[tuple[str, list[StepRecord]]]:
    """Yield (step name, per-rank records) for each step of all `layers`; the all-reduce sums every
    rank's partial in rank order (fp32). See `loop.run_steps`."""
    return run_steps(layers, hidden, positions, mode, sum_in_rank_order, hooks, observers)
