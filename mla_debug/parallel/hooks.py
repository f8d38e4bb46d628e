"""Step hooks: functions the step loop calls after a step, on every rank, that may replace its output.

A hook is ``fn(record, state) -> torch.Tensor | None``. `record` is the rank's StepRecord of the step
just run (``record.rank``, ``record.gather`` and ``record.gather_dim`` say which share of the gathered
output it holds) and `state` the rank's state dict, to read only. Returning None leaves the step as
it was; returning a tensor replaces the step's output on that rank, in the record and where later
steps read it (`mla_debug.model.program.replace_output`: same shape and dtype as the output, or a
clear error naming the step; a step whose later readers take something else refuses).

Hooks are given per step name: ``{"q_b_proj": fn}`` or ``{"q_b_proj": [fn, other]}``; several run in
order, each seeing the record as the previous one left it. A `Patch` adds its hooks before the
caller's, so the caller's hooks see the patched output. For the distributed executor every hook is
sent to each rank process, so it must be picklable (a module-level function or an instance of a
module-level class, not a lambda or a closure).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence

import torch

from ..model.program import Step, replace_output
from ..model.records import StepRecord
from .patch import Patch

StepHook = Callable[[StepRecord, dict], "torch.Tensor | None"]
Hooks = Mapping[str, "StepHook | Sequence[StepHook]"]  # what a caller passes
HookTable = dict[str, tuple[StepHook, ...]]  # what the loop runs


def hook_table(hooks: Hooks | None, patch: Patch | None = None, tp_size: int = 1) -> HookTable:
    """The hooks of one run by step name: a `Patch`'s (resolved for `tp_size`) first, then `hooks`'."""
    table: HookTable = {}
    if patch is not None:
        if not isinstance(patch, Patch):
            raise TypeError(f"patch must be an mla_debug Patch (md.Patch(from_run, steps)), got {type(patch).__name__}")
        for name, fn in patch.hooks(tp_size).items():
            table[name] = (fn,)
    if hooks is None:
        return table
    if not isinstance(hooks, Mapping):
        raise TypeError(f"hooks must map step names to a hook or a list of hooks, got {type(hooks).__name__}")
    for name, value in hooks.items():
        if not isinstance(name, str):
            raise TypeError(f"hooks: step names must be strings, got {name!r}")
        fns = (value,) if callable(value) else value
        if not isinstance(fns, Sequence) or isinstance(fns, str):
            raise TypeError(f"hooks[{name!r}]: expected a hook fn(record, state) or a list of them, got {value!r}")
        for fn in fns:
            if not callable(fn):
                raise TypeError(f"hooks[{name!r}]: {fn!r} is not callable; a hook is fn(record, state)")
        table[name] = table.get(name, ()) + tuple(fns)
    return table


def check_hook_steps(table: HookTable, program: Sequence[Step], what: str) -> None:
    """Every hooked step name is a step of `program` (`what` names the program in the error)."""
    names = [step.name for step in program]
    unknown = [name for name in table if name not in names]
    if unknown:
        raise ValueError(f"hooks for {unknown}, which {what} does not run; its steps: {names}")


def require_picklable(table: HookTable) -> None:
    """A clear error, before any rank starts, for a hook the distributed executor cannot send."""
    for name, fns in table.items():
        for fn in fns:
            try:
                pickle.dumps(fn)
            except Exception as exc:  # pickle raises several types (PicklingError, AttributeError, TypeError)
                raise TypeError(
                    f"hooks[{name!r}]: {fn!r} cannot be sent to the rank processes of the distributed executor "
                    f"({type(exc).__name__}: {exc}); use a module-level function or class instance, or "
                    "executor='simulated'"
                ) from exc


def apply_hooks(step: Step, fns: Sequence[StepHook], record: StepRecord, state: dict) -> None:
    """Run `fns` on one rank's record of `step`, replacing its output where a hook returns a tensor."""
    for fn in fns:
        new = fn(record, state)
        if new is not None:
            replace_output(step, state, record, new)
