"""What two captures' layer inputs already differ by, and what that difference alone makes of each step.

Past the first layer, two runs at different TP sizes (or two engines) reach a layer with inputs that
differ in the last bits: every earlier layer summed its ranks' partial products in another order. Every
step then differs by what its inputs' difference makes of it, on top of its own rounding. The diff
removes that part before judging a step: it runs the fp32 truth of the checkpoint
(`explain.reference.truth_capture`) on each side's own inputs - layer input and context rows - and
takes the truth's change of each step's output, b's minus a's (`inherited_deltas`). What is left of
b - a once that change is taken away is each side's own rounding, or a defect: the residual the noise
floor judges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .._json_records import JsonRecord
from ..capture import Capture, TensorRole
from ..capture.context import CONTEXT_INPUT
from ..capture.gather import max_abs_diff
from ..model import Checkpoint
from ..numerics import rel_l2


@dataclass(frozen=True)
class InputDifference(JsonRecord):
    """b's layer input (and the context rows its keys came from) against a's: identical bytes, or how far
    apart (relative L2 and max |b - a| of the kept rows' input)."""

    identical: bool
    rel_err: float = 0.0
    max_abs: float = 0.0
    context_identical: bool = True

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> InputDifference | None:
        """None for a diff that recorded no layer input."""
        return None if data is None else super().from_dict(data)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _same(x: torch.Tensor | None, y: torch.Tensor | None) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return x.shape == y.shape and x.dtype == y.dtype and torch.equal(_bytes(x), _bytes(y))


def _context(capture: Capture) -> torch.Tensor | None:
    return capture.gathered(CONTEXT_INPUT) if CONTEXT_INPUT in capture.ranks[0].tensors else None


def input_difference(a: Capture, b: Capture) -> InputDifference:
    """How far b's layer input (and context) is from a's."""
    xa, xb = a.hidden, b.hidden
    same_context = _same(_context(a), _context(b))
    if _same(xa, xb):
        return InputDifference(True, context_identical=same_context)
    if xa.shape != xb.shape:
        return InputDifference(False, math.inf, math.inf, same_context)
    return InputDifference(False, rel_l2(xb, xa), max_abs_diff(xa, xb), same_context)


def inherited_deltas(a: Capture, b: Capture, ckpt: Checkpoint, dense: Checkpoint | None = None, truth_a=None):
    """Per output name both truths hold: the fp32 truth's output on b's inputs minus that on a's (the
    change the input difference alone makes), in the capture's gathered shape. `dense` (the checkpoint's
    dequantized twin) and `truth_a` (the truth run on a's inputs) reuse what the noise floor made."""
    from ..verdict.floor import dense_twin
    from .reference import truth_capture

    dense = dense_twin(ckpt) if dense is None else dense
    truth_a = truth_capture(a, ckpt, dense, truth_a)
    truth_b = truth_capture(b, ckpt, dense)
    deltas: dict[str, torch.Tensor] = {}
    for name in truth_a.names(TensorRole.OUTPUT):
        ya, yb = truth_a.gathered(name), truth_b.gathered(name)
        if ya.shape == yb.shape:
            deltas[name] = yb.to(torch.float32) - ya.to(torch.float32)
    return deltas
