"""The one step loop of a layer forward, driven by both executors.

The in-process executor runs every rank of a TP group here, in lock step; the distributed executor
runs one rank per process, each through this same loop. The only difference between them is how the
partial sums of the row-parallel output projection are all-reduced, so that is passed in:

- in-process: `sum_in_rank_order` over all ranks' partials;
- distributed: an all-gather of every rank's partial, then the same fp32 sum in rank order.

Both therefore give bitwise identical runs. Around each step the loop enters its observers'
`around_step` (the profiler's ``mla.<step>[<kernel>]`` ranges); after each step it runs that step's
hooks on every rank (`parallel.hooks`), which may replace the step's output before later steps read it.
Hooks run outside the observed range, so a step's time is the step's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack

import torch

from ..model.program import RankLayer, step_label
from ..model.records import StepRecord
from .hooks import HookTable, apply_hooks, check_hook_steps
from .observe import StepObserver

# Takes the partial sums this process holds (one per local rank, in rank order) and returns the full
# fp32 sum every rank continues with.
AllReduce = Callable[[list[torch.Tensor]], torch.Tensor]


def run_steps(
    layers: Sequence[RankLayer],
    hidden: torch.Tensor,
    positions: torch.Tensor,
    mode: str,
    all_reduce: AllReduce,
    hooks: HookTable | None = None,
    observers: Sequence[StepObserver] = (),
) -> Iterator[tuple[str, list[StepRecord]]]:
    """Run the ranks in `layers` (all of a TP group, or this process's one) step by step; yield
    (step name, the ranks' records) after each step, hooks applied.

    Inputs are validated by the caller (`parallel.run`), once per call. Each step's observer ranges
    close before the yield, so a paused generator (a notebook stepping op by op) leaves none open.
    """
    hooks = hooks or {}
    # One converted copy for all ranks: replicated linears then see the same input tensor and compute once.
    hidden = hidden.to(layers[0].dtype)
    states = [layer.begin(hidden, positions) for layer in layers]
    programs = [layer.steps(mode) for layer in layers]
    check_hook_steps(hooks, programs[0], f"the {mode} forward of {layers[0].cfg.name}")
    for index, step in enumerate(programs[0]):
        with ExitStack() as ranges:
            if observers:
                label = step_label(layers[0], step.name)
                for observer in observers:
                    ranges.enter_context(observer.around_step(step.name, label))
            if step.collective:
                reduced = all_reduce([state["partial"] for state in states])
                records = [layer.finish_all_reduce(state, reduced) for layer, state in zip(layers, states)]
            else:
                records = [program[index].run(state) for program, state in zip(programs, states)]
        fns = hooks.get(step.name)
        if fns:
            for program, state, record in zip(programs, states, records):
                apply_hooks(program[index], fns, record, state)
        yield step.name, records
