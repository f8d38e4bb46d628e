"""Builders and bounds shared by the kernel tests."""

from __future__ import annotations

import math

import torch

import mla_debug as md


def random_weight(n: int, k: int, gen: torch.Generator, fmt=md.E4M3FN) -> md.QuantizedWeight:
    """A block-quantized weight whose 128x128 blocks have different magnitudes (so scales differ)."""
    w = torch.randn(n, k, generator=gen) * 0.02
    rows = torch.rand(-(-n // 128), generator=gen).repeat_interleave(128)[:n] * 4 + 0.1
    return md.layouts.quantize_blocks(w * rows[:, None], fmt=fmt)


def random_tokens(m: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """bf16 activations whose tokens differ in magnitude by up to 1000x (so per-token scales differ)."""
    x = torch.randn(m, k, generator=gen)
    magnitudes = torch.logspace(0, 3, m)[torch.randperm(m, generator=gen)]
    return (x * magnitudes[:, None]).to(torch.bfloat16)


def linear(name: str, weight: md.QuantizedWeight, kernel: str, **options) -> md.kernels.BlockScaledLinear:
    return md.kernels.BlockScaledLinear(name, weight).attach(md.get_kernel(kernel, **options))


def accumulation_bound(qa: md.QuantizedActivation, weight: md.QuantizedWeight) -> torch.Tensor:
    """Per-element bound on the difference of two fp32 accumulation orders of the same products.

    Each term x_k*w_k*scales is formed with at most 3 roundings and summed in fp32; any summation
    order of K terms is within (K + 3) * 2^-24 * sum|terms| of the exact sum (standard recursive
    summation bound, doubled to compare two orders). The bf16 cast then adds at most one bf16 ulp.
    """
    k = qa.k
    x = qa.dequantize().abs().double()
    w = weight.dequantize_plain().abs().double()
    return 2 * (k + 3) * 2.0**-24 * (x @ w.t())


def bf16_ulp(values: torch.Tensor) -> torch.Tensor:
    magnitude = values.double().abs().clamp_min(2.0**-126)
    return torch.exp2(torch.floor(torch.log2(magnitude)) - 7)


def assert_within_accumulation_bound(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor) -> None:
    a, e = actual.double(), expected.double()
    allowed = bound + bf16_ulp(torch.maximum(a.abs(), e.abs()))
    excess = (a - e).abs() - allowed
    worst = excess.max().item()
    assert math.isfinite(worst) and worst <= 0, f"outside the fp32 accumulation bound by {worst:g}"
