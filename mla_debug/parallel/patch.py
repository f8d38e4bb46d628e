"""Activation patching: run a layer with a reference run's outputs substituted at chosen steps.

What TransformerLens does for interpretability, applied to kernels and layouts: if a configuration
diverges first at step S, running it again with S's output taken from a correct run says whether the
fault is inside S (every later step recovers) or not (a later step still diverges: a second fault, or
an earlier one that stayed below the noise floor). `mla_debug.triage.patching` makes that verdict.

A LayerRun's records are gathered (TP-independent), so the reference may come from any TP size. To
patch a TP-N run each rank gets back its share of the gathered output, the inverse of
`parallel.gather.gather_step`:

- CONCAT (column-parallel): the rank's slice along ``gather_dim`` (shards are equal and in rank order);
- PARTIAL (row-parallel partial sums): rank 0 gets the whole value, every other rank (negative)
  zeros, so the fp32 sum in rank order reproduces it bit for bit;
- REPLICATED: the whole tensor on every rank.

    reference = md.run_layer(cfg, ckpt, hidden, positions, tp_size=4, mode="decode")
    patched = md.run_layer(cfg, ckpt, hidden, positions, tp_size=4, mode="decode",
                           scenario="vllm-pr51692", patch=md.Patch(reference, ["absorb_uk"]))
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..model.records import CONCAT, PARTIAL, StepRecord


class ShardedReplacement:
    """The hook that gives each rank its share of one gathered reference output (module-level and
    plain, so the distributed executor can send it to rank processes)."""

    def __init__(self, step: str, gathered: torch.Tensor, tp_size: int) -> None:
        self.step, self.gathered, self.tp_size = step, gathered, tp_size

    def __call__(self, record: StepRecord, state: dict) -> torch.Tensor:
        full, out = self.gathered, record.output
        if out is None:
            raise ValueError(f"patch of step {self.step}: the step recorded no output on rank {record.rank}")
        if record.gather == CONCAT:
            dim = record.gather_dim % out.dim()
            expected = list(out.shape)
            expected[dim] *= self.tp_size
            if list(full.shape) != expected:
                raise ValueError(
                    f"patch of step {self.step}: the reference output has shape {tuple(full.shape)}, but a TP{self.tp_size} "
                    f"run's gathered output is {tuple(expected)} (rank {record.rank}'s share {tuple(out.shape)} "
                    f"concatenated along dim {dim}); was the reference run on other inputs or another model?"
                )
            share = out.shape[dim]
            return full.narrow(dim, record.rank * share, share).contiguous()
        if full.shape != out.shape:
            raise ValueError(
                f"patch of step {self.step}: the reference output has shape {tuple(full.shape)}, but the step's "
                f"output on rank {record.rank} is {tuple(out.shape)}; was the reference run on other inputs or "
                "another model?"
            )
        if record.gather == PARTIAL and record.rank != 0:
            # Negative zeros: x + (-0.0) is x for every x, signed zeros included (+0.0 would turn a
            # -0.0 of rank 0's value into +0.0), so the rank-order sum is the reference bit for bit.
            return torch.full_like(full, -0.0)
        return full

    def __repr__(self) -> str:
        return f"ShardedReplacement({self.step!r}, {tuple(self.gathered.shape)}, tp_size={self.tp_size})"


class Patch:
    """The outputs of `steps` taken from `from_run` (a LayerRun, any TP size), to substitute in another
    run: ``run_layer(..., patch=md.Patch(reference, ["absorb_uk"]))``, ``MLALayer.run(..., patch=...)``.

    The patched run's records of those steps are marked ``replaced``; every later step consumes the
    substituted values. A step whose output later steps do not read as recorded (DeepSeek-V4's fused
    q_norm, whose consumers read its FP8 data) cannot be patched: the run raises, naming it.
    """

    def __init__(self, from_run, steps: str | Iterable[str]) -> None:
        records = getattr(from_run, "records", None)
        if not isinstance(records, dict):
            raise TypeError(f"from_run must be a LayerRun (the reference run), got {type(from_run).__name__}")
        names = [steps] if isinstance(steps, str) else list(steps)
        if not names:
            raise ValueError("Patch: steps is empty; name at least one step to take from the reference run")
        bad = [name for name in names if not isinstance(name, str)]
        if bad:
            raise TypeError(f"Patch: step names must be strings, got {bad}")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"Patch: steps {repeated} are given more than once")
        missing = [name for name in names if name not in records]
        if missing:
            raise ValueError(f"Patch: the reference run {from_run!r} has no step {missing}; its steps: {list(records)}")
        empty = [name for name in names if records[name].output is None]
        if empty:
            raise ValueError(f"Patch: the reference run recorded no output for {empty}")
        self.steps: tuple[str, ...] = tuple(names)
        self.outputs: dict[str, torch.Tensor] = {name: records[name].output for name in names}
        self.source = repr(from_run)

    def hooks(self, tp_size: int) -> dict[str, ShardedReplacement]:
        """One hook per patched step, giving each rank of a `tp_size` run its share."""
        return {name: ShardedReplacement(name, self.outputs[name], tp_size) for name in self.steps}

    def __repr__(self) -> str:
        return f"Patch({', '.join(self.steps)} from {self.source})"
