"""In-process executor: every rank of one TP group runs in this process, in lock step, op by op."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..model.program import RankLayer, step_label
from ..model.records import StepRecord
from .gather import sum_in_rank_order


def run_lockstep(
    layers: list[RankLayer], hidden: torch.Tensor, positions: torch.Tensor, mode: str
) -> Iterator[tuple[str, list[StepRecord]]]:
    """Yield (step name, per-rank records) for each step; the all-reduce sums partials in rank order."""
    # One converted copy for all ranks: replicated linears then see the same input tensor and compute once.
    hidden = hidden.to(layers[0].dtype)
    states = [layer.begin(hidden, positions) for layer in layers]
    programs = [layer.steps(mode) for layer in layers]
    for index, step in enumerate(programs[0]):
        # One profiler range per step around all in-process ranks (~5 us with no profiler running); it
        # closes before the yield so a paused generator never leaves a range open.
        with torch.profiler.record_function(step_label(layers[0], step.name)):
            if step.collective:
                reduced = sum_in_rank_order([state["partial"] for state in states])
                records = [layer.finish_all_reduce(state, reduced) for layer, state in zip(layers, states)]
            else:
                records = [program[index].run(state) for program, state in zip(programs, states)]
        yield step.name, records
