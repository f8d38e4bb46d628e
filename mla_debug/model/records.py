"""What one op of a layer run leaves behind: output, kernel, layouts consumed, broken contracts, stats."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..layouts import ContractViolation, ScaleRead, WeightLayout

# How a step's per-rank outputs combine into one TP-independent tensor.
REPLICATED = "replicated"  # every rank holds the same tensor; rank 0's is kept
PARTIAL = "partial"  # each rank holds a partial sum; summed in rank order (what the all-reduce gives)
CONCAT = "concat"  # column-parallel shards; concatenated in rank order along `gather_dim`


@dataclass(frozen=True)
class StepStats:
    """amax of the finite values of a step output (NaN when none is finite), and its NaN / Inf counts."""

    amax: float
    nan: int
    inf: int

    @classmethod
    def of(cls, t: torch.Tensor) -> StepStats:
        t = t.detach()
        if not t.is_floating_point() or t.numel() == 0:
            return cls(0.0, 0, 0)
        magnitude = t.abs().to(torch.float32)
        nan, inf = int(torch.isnan(magnitude).sum()), int(torch.isinf(magnitude).sum())
        if nan + inf == 0:
            return cls(amax=magnitude.max().item(), nan=0, inf=0)
        finite = magnitude.nan_to_num(nan=0.0, posinf=0.0)
        amax = finite.max().item() if nan + inf < t.numel() else float("nan")
        return cls(amax=amax, nan=nan, inf=inf)


@dataclass
class StepRecord:
    """One op of one layer forward.

    ``rank`` is the rank for a per-rank record and None for the gathered (TP-independent) record.
    ``kernel`` names the GEMM kernel (or the producer/reader) that ran. ``scale_layout`` says how the
    step handed over its activation scale (ScaleRead: the layout written, the layout it was read as)
    and ``weight_layout`` which weight layout it read (WeightLayout: every transform and who made it);
    both are None for a step that has no such operand.
    ``replaced`` is True when a hook replaced the output the step computed (activation patching,
    `mla_debug.parallel.Patch`).
    """

    name: str
    output: torch.Tensor | None
    rank: int | None = None
    kernel: str | None = None
    gather: str = REPLICATED
    gather_dim: int = -1
    scale_layout: ScaleRead | None = None
    weight_layout: WeightLayout | None = None
    violations: list[ContractViolation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    replaced: bool = False
    _stats: StepStats | None = field(default=None, repr=False, compare=False)

    @property
    def stats(self) -> StepStats | None:
        """amax / NaN / Inf counts of the output, computed on first use (recording stays cheap)."""
        if self._stats is None and self.output is not None:
            self._stats = StepStats.of(self.output)
        return self._stats

    @property
    def effective_violations(self) -> list[ContractViolation]:
        return [v for v in self.violations if v.effective]

    def summary(self) -> str:
        """One line: output shape, kernel, layouts, stats, and every broken contract in words.

        The violations are spelled out (not counted): a summary is read to learn what went wrong, and
        each message already says whether the misread is harmful or harmless at this shape.
        """
        shape = tuple(self.output.shape) if self.output is not None else "-"
        parts = [f"{self.name}: {shape}", f"kernel {self.kernel or '-'}"]
        if self.scale_layout is not None:
            parts.append(f"scale {self.scale_layout}")
        if self.weight_layout is not None:
            parts.append(f"weight {self.weight_layout}")
        if self.stats:
            parts.append(f"amax {self.stats.amax:.3g}, nan {self.stats.nan}, inf {self.stats.inf}")
        if self.replaced:
            parts.append("output replaced by a hook")
        line = "; ".join(parts)
        if len(self.violations) == 1:
            line += f"; violation: {self.violations[0]}"
        elif self.violations:
            # Messages contain '; ' themselves, so each is numbered to keep them apart.
            listed = " ".join(f"({i}) {v}" for i, v in enumerate(self.violations, 1))
            line += f"; {len(self.violations)} violations: {listed}"
        return line
