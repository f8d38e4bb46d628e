"""Watching runs without reaching into them: step observers, run listeners and announcements.

Tools above this layer (the profiler) take part in runs through two small contracts, so the step loop
never imports them:

- a `StepObserver` wraps where steps execute: `around_step` around each step (on every in-process run,
  or inside each rank process of the distributed executor), and `around_rank` around the whole of one
  rank process's work (distributed executor only). Observers are sent to rank processes, so they must
  be picklable: plain objects holding plain data.
- `ProfilerRanges`, the one observer every run carries: a ``mla.<step>[<kernel>]`` profiler range
  around each step, so any torch.profiler session (`md.profile` or the user's own) attributes its ops
  and kernels to steps. A range costs a few microseconds when no profiler records.
- a `RunListener` is registered for a stretch of code (`listening`). While it is, every run asks it
  for step observers (`step_observers(executor)`), and every finished result announces itself to it
  (`run_done(result)`). A result describes itself with a `RunDescription` (its ``description``).

A result made of many runs (a triage) makes them inside `parts_of_one_result`: they are observed step
by step like any run but not announced; the whole result announces itself when it is done.

Listeners are the one registry here: a context variable, so threads and async tasks each see their own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Protocol, TypeVar, runtime_checkable

import torch

__all__ = [
    "ProfilerRanges",
    "RunDescription",
    "RunListener",
    "StepObserver",
    "announce",
    "listening",
    "parts_of_one_result",
    "step_observers",
]


@dataclass(frozen=True)
class RunDescription:
    """What a finished run (or a result made of runs) was: model, platform, scenario, TP size(s),
    mode(s), tokens and executor. A triage gives tuples of the TP sizes and modes it covered."""

    model: str
    platform: str
    scenario: str
    tp: int | tuple[int, ...]
    mode: str | tuple[str, ...]
    tokens: int | None
    executor: str

    @classmethod
    def of(cls, run, tp: int | tuple[int, ...], mode: str | tuple[str, ...], executor: str) -> RunDescription:
        """The description of `run` (anything with a model, platform, scenario and tokens) at `tp`, `mode`."""
        return cls(run.model, run.platform, run.scenario, tp, mode, run.tokens, executor)

    def to_dict(self) -> dict:
        """Plain JSON-ready data (tuples as lists)."""
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}


class StepObserver:
    """Base of the objects that wrap a run's steps where they execute; both methods default to doing
    nothing. Instances travel to rank processes by pickle: keep them plain."""

    def around_rank(self, rank: int, device: torch.device) -> AbstractContextManager:
        """Entered in a distributed rank process around all its work (building its layer, its steps)."""
        return nullcontext()

    def around_step(self, step: str, label: str) -> AbstractContextManager:
        """Entered around one step: `step` is its name, `label` the ``mla.<step>[<kernel>]`` range name
        (`mla_debug.model.program.step_label`). In-process, one entry covers every rank's share."""
        return nullcontext()


class ProfilerRanges(StepObserver):
    """A ``mla.<step>[<kernel>]`` range around every step; the trace analysis (`mla_debug.profiling`)
    parses the names back into a step and its GEMM kernel."""

    def around_step(self, step: str, label: str) -> AbstractContextManager:
        return torch.profiler.record_function(label)


@runtime_checkable
class RunListener(Protocol):
    def step_observers(self, executor: str) -> Sequence[StepObserver]:
        """The observers a run with `executor` ("simulated" or "distributed") should carry."""

    def run_done(self, result) -> None:
        """A finished result (a LayerRun, a TriageResult) announcing itself; it has a ``description``."""


_LISTENERS: ContextVar[tuple[RunListener, ...]] = ContextVar("mla_debug_run_listeners", default=())
_PARTS: ContextVar[int] = ContextVar("mla_debug_result_parts", default=0)

Result = TypeVar("Result")


@contextmanager
def listening(listener: RunListener) -> Iterator[RunListener]:
    """Register `listener` for the runs made inside the ``with`` block."""
    if not isinstance(listener, RunListener):
        raise TypeError(f"{type(listener).__name__} is not a RunListener (it needs step_observers and run_done)")
    token = _LISTENERS.set(_LISTENERS.get() + (listener,))
    try:
        yield listener
    finally:
        _LISTENERS.reset(token)


def step_observers(executor: str) -> list[StepObserver]:
    """The profiler ranges, then every active listener's observers for a run with `executor`, in
    registration order."""
    return [ProfilerRanges()] + [
        observer for listener in _LISTENERS.get() for observer in listener.step_observers(executor)
    ]


@contextmanager
def parts_of_one_result() -> Iterator[None]:
    """Runs made inside are parts of one larger result: observed, but not announced on their own."""
    token = _PARTS.set(_PARTS.get() + 1)
    try:
        yield
    finally:
        _PARTS.reset(token)


def announce(result: Result) -> Result:
    """Tell every active listener that `result` is done (unless it is part of a larger result being
    made); returns `result` unchanged."""
    if _PARTS.get() == 0:
        for listener in _LISTENERS.get():
            listener.run_done(result)
    return result
