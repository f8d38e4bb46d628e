"""The yardsticks of a triage: the fp32 truth of a layer and the noise floor of a correct FP8 run.

truth     - the same weights dequantized, unquantized activations, fp32 arithmetic, TP1
reference - scenario "reference" (torch-reference kernel, correct layouts) in bf16 with FP8 weights and
            activations, at the TP size under study
floor     - per step, the relative L2 error of the reference against the truth: what FP8 quantization
            alone costs at that step. A run's step diverges when its error against the reference
            exceeds DIVERGENCE_FACTOR x floor (and MIN_THRESHOLD): two correct FP8 runs differ by at most
            about sqrt(2) x floor (independent roundings), a misread scale or weight by far more.
"""

from __future__ import annotations

import torch

from ..model import Checkpoint
from ..numerics import rel_l2


def dense_twin(ckpt: Checkpoint) -> Checkpoint:
    """The checkpoint's weights, dequantized to fp32, as an unquantized checkpoint."""
    if not ckpt.quantized:
        return ckpt
    state = {f"{m}.weight": ckpt.dense_weight(m, dtype=torch.float32) for m in ckpt.linear_modules()}
    state.update({f"{m}.weight": ckpt.norm_weight(m).to(torch.float32) for m in ckpt.norm_modules()})
    return Checkpoint.from_state_dict(ckpt.cfg, state, quantize=False, layer=ckpt.layer)


def step_floor(reference_run, truth_run) -> dict[str, float]:
    """Per-step relative L2 error of a correct FP8 run against the fp32 truth."""
    floor = {}
    for name, record in reference_run.records.items():
        truth = truth_run.records.get(name)
        if truth is None or record.output is None or truth.output.shape != record.output.shape:
            continue
        floor[name] = rel_l2(record.output, truth.output)
    return floor
