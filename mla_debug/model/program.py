"""A layer forward as a list of named steps, so executors can run ranks in lock step (in-process) or
one rank per process (torch.distributed), and notebooks can stop after any step.

Each rank keeps a `state` dict; a local step reads and writes it and returns the rank's StepRecord.
The one collective, the all-reduce after the row-parallel output projection, is run by the executor:
it sums every rank's ``state["partial"]`` in rank order (fp32) and hands the result back.

A step also declares where later steps read its output (`Step.state_key`): the state entry that holds
the recorded output's values, maybe viewed in another shape. That makes replacing a step's output one
well-defined operation (`replace_output`), which hooks and activation patching rely on: the record
and the state entry get the new values, so every later step consumes them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch

from .records import PARTIAL, REPLICATED, StepRecord

# Profiler range names are "mla.<step>[<kernel>]": the trace analysis (mla_debug.profiling) parses them
# back into a step and a kernel, so a trace alone says which GEMM kernel each step ran.
STEP_RANGE_PREFIX = "mla."

# The linear a step runs (its GEMM kernel names the range); V3 and V4 step names never collide here.
STEP_LINEARS = {
    "fused_qkv_a": "fused_qkv_a_proj",
    "q_b_proj": "q_b_proj",
    "kv_b_proj": "kv_b_proj",
    "o_proj": "o_proj",
    "fused_wqa_wkv": "fused_wqa_wkv",
    "wq_b": "wq_b",
    "indexer_q": "indexer.wq_b",
    "wo_b": "wo_b",
}

# Steps without a GEMM kernel get a short op label.
STEP_OPS = {
    "q_a_layernorm": "rmsnorm",
    "kv_a_layernorm": "rmsnorm",
    "q_norm": "rmsnorm",
    "kv_norm": "rmsnorm",
    "q_head_norm": "rmsnorm",
    "rope": "rope",
    "inverse_rope": "rope",
    "attention": "attention",
    "absorb_uk": "bmm",
    "absorb_uv": "bmm",
    "wo_a": "bmm",
    "all_reduce": "all_reduce",
}


def step_label(layer: RankLayer, step_name: str) -> str:
    """The profiler range name of one step: ``mla.<step>[<kernel>]``.

    The kernel is the GEMM kernel of the step's linear on this rank (the one the model calls directly
    when it bypasses the selected kernel), else a short op label ("rmsnorm", "rope", "bmm", ...).

    >>> step_label(layer.ranks[0], "q_b_proj")   # 'mla.q_b_proj[aiter-bpreshuffle]'
    """
    linear = layer.linears.get(STEP_LINEARS.get(step_name, ""))
    if linear is not None:
        direct = getattr(linear, "direct_kernel", None)
        kernel = direct.name if direct is not None else getattr(linear, "kernel_name", "linear")
    else:
        kernel = STEP_OPS.get(step_name, "op")
    return f"{STEP_RANGE_PREFIX}{step_name}[{kernel}]"


@dataclass
class Step:
    """One op of a rank's forward.

    ``state_key`` names the state entry later steps read this step's output from (it holds the
    recorded output's values, possibly in another shape); None when no later step reads the output.
    ``fixed`` says why the output cannot be replaced, for a step whose later readers take something
    other than its recorded output (None: replaceable).
    """

    name: str
    run: Callable[[dict], StepRecord] | None
    collective: bool = False
    state_key: str | None = None
    fixed: str | None = None


class StepNotReplaceable(ValueError):
    """A hook asked to replace the output of a step whose later readers take something else."""


def replace_output(step: Step, state: dict, record: StepRecord, new: torch.Tensor) -> None:
    """Make `new` the output of `step` on the record's rank: in the record and in the state entry
    later steps read (`Step.state_key`), so the rest of the forward consumes it.

    `new` must have the recorded output's shape and dtype (it is moved to the output's device); the
    record is marked ``replaced``. Tensors are never written in place: a shared linear's memoized
    result or an input the caller still holds stays as it was.
    """
    where = f"step {step.name}" + (f" on rank {record.rank}" if record.rank is not None else "")
    if step.fixed is not None:
        raise StepNotReplaceable(f"{where}: its output cannot be replaced: {step.fixed}")
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"{where}: a hook returned {type(new).__name__}; it must return a torch.Tensor or None")
    old = record.output
    if old is None:
        raise StepNotReplaceable(f"{where}: the step recorded no output, so there is nothing to replace")
    if new.shape != old.shape or new.dtype != old.dtype:
        raise ValueError(
            f"{where}: a replacement must have the step's output shape {tuple(old.shape)} and dtype {old.dtype}, "
            f"got shape {tuple(new.shape)} and dtype {new.dtype}"
        )
    new = new.to(old.device)
    record.output = new
    record.replaced = True
    record._stats = None  # recomputed from the new values on first use
    if step.state_key is not None:
        state[step.state_key] = new.reshape(state[step.state_key].shape)


class RankLinears(Mapping):
    """A rank layer's linears by name, whose reads can be watched: a step reaches a linear only by looking
    it up here, so `watch(listener)` (listener(name) on every lookup, iteration included) tells an executor
    that reuses results which linears each step depended on. Iterating counts as reading every linear."""

    def __init__(self, linears: Mapping) -> None:
        self._linears = dict(linears)
        self._listener: Callable[[str], None] | None = None

    def watch(self, listener: Callable[[str], None] | None) -> None:
        """Report every later lookup to `listener` (None: stop reporting)."""
        self._listener = listener

    def __getitem__(self, name: str):
        if self._listener is not None and name in self._linears:
            self._listener(name)
        return self._linears[name]

    def __iter__(self) -> Iterator[str]:
        if self._listener is not None:
            for name in self._linears:
                self._listener(name)
        return iter(self._linears)

    def __len__(self) -> int:
        return len(self._linears)

    def __contains__(self, name: object) -> bool:
        return name in self._linears


class RankLayer(ABC):
    """Base of the per-rank layers: shared helpers for records and the all-reduce."""

    def __init__(
        self, cfg, linears: Mapping, norms: dict, rank: int, tp_size: int, dtype: torch.dtype, behaviour
    ) -> None:
        self.cfg = cfg
        self.linears = RankLinears(linears)
        self.norms = norms
        self.rank = rank
        self.tp_size = tp_size
        self.dtype = dtype
        self.behaviour = behaviour
        # Load-history lines a builder adds per linear that depend on the model behaviour, not on the
        # linear (a load order): kept here because loaded linears may be shared by runs of other behaviours.
        self.load_events: dict[str, list[str]] = {}

    @abstractmethod
    def steps(self, mode: str) -> list[Step]:
        """The ordered program of one forward in `mode` ("prefill" or "decode")."""

    def begin(self, hidden: torch.Tensor, positions: torch.Tensor) -> dict:
        return {"hidden": hidden.to(self.dtype), "positions": positions}

    def record(
        self, name: str, output: torch.Tensor, gather: str = REPLICATED, gather_dim: int = -1, **fields
    ) -> StepRecord:
        return StepRecord(
            name=name,
            output=output,
            rank=self.rank,
            gather=gather,
            gather_dim=gather_dim,
            **fields,
        )

    def linear_record(self, name: str, call, gather: str, gather_dim: int = -1, **fields) -> StepRecord:
        return self.record(
            name,
            call.output,
            gather,
            gather_dim,
            kernel=call.kernel,
            scale_layout=call.scale_layout,
            weight_layout=call.weight_layout,
            violations=list(call.violations),
            **fields,
        )

    @staticmethod
    def all_reduce_step() -> Step:
        """The collective that ends every forward: the executor sums ``state["partial"]`` over ranks."""
        return Step("all_reduce", None, collective=True, state_key="output")

    def finish_all_reduce(self, state: dict, reduced: torch.Tensor) -> StepRecord:
        state["output"] = reduced.to(self.dtype)
        return self.record("all_reduce", state["output"], REPLICATED, kernel="all-reduce (sum in rank order)")

    def partial_record(self, name: str, call, state: dict) -> StepRecord:
        state["partial"] = call.output
        return self.linear_record(name, call, PARTIAL)
