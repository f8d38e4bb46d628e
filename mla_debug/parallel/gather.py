"""Combine the per-rank records of one step into one TP-independent record, so that a TP4 run and a
TP1 run compare step by step: column-parallel outputs concatenated in rank order, partial sums summed
in rank order (fp32), replicated outputs taken from rank 0."""

from __future__ import annotations

from dataclasses import replace

import torch

from ..model.records import CONCAT, PARTIAL, StepRecord


def sum_in_rank_order(tensors: list[torch.Tensor]) -> torch.Tensor:
    """fp32 sum in a fixed order, so every executor reduces bit-identically."""
    total = tensors[0].to(torch.float32).clone()
    for t in tensors[1:]:
        total += t.to(torch.float32)
    return total


def gather_step(records: list[StepRecord]) -> StepRecord:
    first = records[0]
    outputs = [r.output for r in records]
    if first.gather == CONCAT:
        output = torch.cat(outputs, dim=first.gather_dim)
    elif first.gather == PARTIAL:
        output = sum_in_rank_order(outputs).to(first.output.dtype)
    else:
        output = first.output
    violations = list(dict.fromkeys(v for record in records for v in record.violations))
    notes = list(dict.fromkeys(note for record in records for note in record.notes))
    return replace(first, output=output, rank=None, violations=violations, notes=notes, _stats=None)
