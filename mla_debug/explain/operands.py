"""Explain one op from its operands: the stories of `format_stories` ranked on every rank.

`explain_operands` is `explain_capture` for a single block-scaled GEMM whose tensors were recorded
outside an attention layer's canonical steps - a grouped GEMM (DeepSeek-V4's wo_a ``fp8_einsum``), an
expert GEMM of a MoE layer - or whose scales the engine held in another representation than fp32. Its
result is the same `StepExplanation`, judged the same way (`explain.judge`): EXPLAINED when a
story reproduces the observed output on every rank within `tolerance` and the intended computation does
not, CORRECT_FROM_INPUTS when the intended computation does, NO_STORY when nothing does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .explain import DEFAULT_TOLERANCE, Outcome, StepExplanation, _rank_candidates, judge
from .format_stories import FormatOperands, format_candidates, nan_aware_rel_err
from .stories import Reading, StoryKind


def explain_operands(
    step: str,
    operands: Sequence[FormatOperands],
    observed: Sequence[torch.Tensor],
    *,
    tensor: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> StepExplanation:
    """Rank every reading of `operands` (one per rank) against the `observed` outputs (one per rank).

    `step` names the op as the engine does (``wo_a``, ``experts.w13``), `tensor` the tensor the stories
    are about. A story counts only where it holds on every rank (the worst rank's error ranks it)."""
    if len(operands) != len(observed) or not operands:
        raise ValueError(
            f"{step}: {len(operands)} operand set(s) and {len(observed)} observed output(s); one of each per rank"
        )
    results: dict[tuple, list[float]] = {}
    keys: dict[tuple, tuple] = {}
    for rank, (ops, out) in enumerate(zip(operands, observed)):
        for kinds, candidate in format_candidates(ops):
            if candidate.shape != out.shape:
                raise ValueError(
                    f"{step}: rank {rank}'s observed output has shape {tuple(out.shape)}, the operands give "
                    f"{tuple(candidate.shape)}"
                )
            key = kinds or (StoryKind.CORRECT,)
            keys[key] = (key, Reading())
            results.setdefault(key, []).append(nan_aware_rel_err(candidate, out))
    complete = {k: v for k, v in results.items() if len(v) == len(operands)}
    candidates = _rank_candidates(complete, keys)
    outcome = judge(candidates, tolerance)
    correct = next((c for c in candidates if c.is_correct), None)
    return StepExplanation(
        step,
        outcome,
        candidates,
        tolerance,
        tensor or step,
        observed_rel_err=None if correct is None else correct.rel_err,
    )


__all__ = ["Outcome", "explain_operands"]
