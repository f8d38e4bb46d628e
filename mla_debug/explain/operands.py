"""Explain one op from its operands: the stories of `format_stories` ranked on every rank.

`explain_operands` is `explain_capture` for a single block-scaled GEMM whose tensors were recorded
outside an attention layer's canonical steps - a grouped GEMM (DeepSeek-V4's wo_a ``fp8_einsum``), an
expert GEMM of a MoE layer - or whose scales the engine held in another representation than fp32. Its
result is the same `StepExplanation`, judged the same way, rank by rank (`explain.ranks`): EXPLAINED
when on some rank a story reproduces the observed output within `tolerance` and the intended computation
does not (the intended one reproducing the other ranks), CORRECT_FROM_INPUTS when the intended
computation does on every rank, NO_STORY when nothing does on some rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .explain import DEFAULT_TOLERANCE, Outcome, StepExplanation, _rank_candidates
from .format_stories import FormatOperands, format_candidates, nan_aware_rel_err
from .ranks import judge_ranks, step_outcome
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
    are about. Each rank is judged on its own; a candidate is ranked by its worst rank's error."""
    if len(operands) != len(observed) or not operands:
        raise ValueError(
            f"{step}: {len(operands)} operand set(s) and {len(observed)} observed output(s); one of each per rank"
        )
    errors: dict[tuple, dict[int, float]] = {}
    keys: dict[tuple, tuple] = {}
    for rank, (ops, out) in enumerate(zip(operands, observed)):
        for kinds, candidate in format_candidates(ops):
            if candidate.shape != out.shape:
                raise ValueError(
                    f"{step}: rank {rank}'s observed output has shape {tuple(out.shape)}, the operands give "
                    f"{tuple(candidate.shape)}"
                )
            named = kinds or (StoryKind.CORRECT,)
            key = (named, "format")  # keys lead with their kinds, as explain_linear's do (`ranks.judge_ranks`)
            keys[key] = (named, Reading())
            errors.setdefault(key, {})[rank] = nan_aware_rel_err(candidate, out)
    ranks = list(range(len(operands)))
    verdicts = judge_ranks(errors, ranks, tolerance)
    candidates = _rank_candidates(errors, keys, ranks)
    outcome = step_outcome(verdicts)
    correct = next((c for c in candidates if c.is_correct), None)
    return StepExplanation(
        step,
        outcome,
        candidates,
        tolerance,
        tensor or step,
        observed_rel_err=None if correct is None else correct.rel_err,
        ranks=verdicts,
    )


__all__ = ["Outcome", "explain_operands"]
