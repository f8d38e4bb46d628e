"""Stories judged rank by rank: a defect on one rank (a loader bug, one shard re-laid out) is a story
of that rank, named, not "no known story" because the other ranks are fine.

Each rank's output is judged on its own: the correct computation from its captured inputs when that
reproduces it (within the step's tolerance), else the best story computed on that rank, else nothing.
A row-parallel output all-reduced inside the engine's module is one sum for all ranks, so its ranks are
judged by hypotheses on the sum instead: every rank correct, every rank reading one way, or one rank
reading one way while the others read correctly (`reduced_hypotheses`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch

from .._json_records import JsonRecord
from ..numerics import rel_l2
from ..parallel.gather import sum_in_rank_order
from .stories import StoryKind


class Outcome(str, Enum):
    EXPLAINED = "explained"
    CORRECT_FROM_INPUTS = "correct_from_inputs"
    NO_STORY = "no_story"
    UNTESTABLE = "untestable"


CORRECT = (StoryKind.CORRECT,)


@dataclass(frozen=True)
class RankOutcome(JsonRecord):
    """One rank's verdict: what reproduces its output (`kinds`, CORRECT alone for the intended read)
    and how well (`rel_err`), beside the correct computation's error on that rank."""

    rank: int
    outcome: Outcome
    kinds: tuple[StoryKind, ...]
    rel_err: float
    correct_rel_err: float


def step_outcome(ranks: tuple[RankOutcome, ...]) -> Outcome:
    """CORRECT_FROM_INPUTS when every rank is, NO_STORY when some rank has nothing, else EXPLAINED."""
    if not ranks:
        return Outcome.NO_STORY
    if all(r.outcome is Outcome.CORRECT_FROM_INPUTS for r in ranks):
        return Outcome.CORRECT_FROM_INPUTS
    if any(r.outcome is Outcome.NO_STORY for r in ranks):
        return Outcome.NO_STORY
    return Outcome.EXPLAINED


def _kinds_of(key) -> tuple[StoryKind, ...]:
    return key[0]


def judge_ranks(errors: dict[tuple, dict[int, float]], ranks: list[int], tolerance: float) -> tuple[RankOutcome, ...]:
    """Each rank's verdict from every candidate's error on it (`errors[key][rank]`, key[0] its kinds)."""
    found = []
    for rank in ranks:
        on_rank = {key: per[rank] for key, per in errors.items() if rank in per and not math.isnan(per[rank])}
        correct = min((e for k, e in on_rank.items() if _kinds_of(k) == CORRECT), default=math.nan)
        if correct <= tolerance:
            found.append(RankOutcome(rank, Outcome.CORRECT_FROM_INPUTS, CORRECT, correct, correct))
            continue
        stories = sorted(((e, len(_kinds_of(k)), _kinds_of(k)) for k, e in on_rank.items() if _kinds_of(k) != CORRECT))
        if stories and stories[0][0] <= tolerance:
            found.append(RankOutcome(rank, Outcome.EXPLAINED, stories[0][2], stories[0][0], correct))
        else:
            best = stories[0] if stories else (correct, 1, CORRECT)
            found.append(RankOutcome(rank, Outcome.NO_STORY, best[2], best[0], correct))
    return tuple(found)


@dataclass(frozen=True)
class Hypothesis:
    """A reading of the ranks of an all-reduced output: `key` on `ranks` (every rank when None), the
    correct read on the others."""

    key: tuple
    ranks: tuple[int, ...] | None
    rel_err: float


def reduced_hypotheses(
    outputs: dict[tuple, dict[int, torch.Tensor]], ranks: list[int], observed: torch.Tensor
) -> list[Hypothesis]:
    """Every hypothesis' error against the all-reduced `observed`: each reading on every rank, and each
    non-correct reading on one rank with the correct one on the rest (sums in rank order, as engines do)."""
    correct_key = next((k for k in outputs if _kinds_of(k) == CORRECT and len(outputs[k]) == len(ranks)), None)
    found = []

    def total(parts: list[torch.Tensor]) -> float:
        return rel_l2(sum_in_rank_order(parts).to(parts[0].dtype), observed)

    for key, per_rank in outputs.items():
        if len(per_rank) == len(ranks):
            found.append(Hypothesis(key, None, total([per_rank[r] for r in ranks])))
        if correct_key is None or _kinds_of(key) == CORRECT or len(ranks) == 1:
            continue
        for rank in per_rank:
            parts = [per_rank[r] if r == rank else outputs[correct_key][r] for r in ranks]
            found.append(Hypothesis(key, (rank,), total(parts)))
    return found


def judge_reduced(hypotheses: list[Hypothesis], ranks: list[int], tolerance: float) -> tuple[RankOutcome, ...]:
    """Each rank's verdict from the hypotheses on their sum (see the module docstring)."""
    correct = min((h.rel_err for h in hypotheses if _kinds_of(h.key) == CORRECT and h.ranks is None), default=math.nan)
    if correct <= tolerance:
        return tuple(RankOutcome(r, Outcome.CORRECT_FROM_INPUTS, CORRECT, correct, correct) for r in ranks)
    stories = sorted(
        (h for h in hypotheses if _kinds_of(h.key) != CORRECT), key=lambda h: (h.rel_err, len(_kinds_of(h.key)))
    )
    if not stories or not stories[0].rel_err <= tolerance:
        best = stories[0] if stories else None
        kinds, err = (_kinds_of(best.key), best.rel_err) if best else (CORRECT, correct)
        return tuple(RankOutcome(r, Outcome.NO_STORY, kinds, err, correct) for r in ranks)
    best = stories[0]
    on = set(ranks if best.ranks is None else best.ranks)
    return tuple(
        RankOutcome(r, Outcome.EXPLAINED, _kinds_of(best.key), best.rel_err, correct)
        if r in on
        else RankOutcome(r, Outcome.CORRECT_FROM_INPUTS, CORRECT, best.rel_err, correct)
        for r in ranks
    )
