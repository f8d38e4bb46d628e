"""The words of layout-forensics verdicts (the ones `mla-debug layouts` tests do not reach)."""

from __future__ import annotations

import torch

from mla_debug.layouts import shuffle_weight
from mla_debug.layouts.forensics import compare_tensor, shuffle_fit
from mla_debug.viz.forensics import shuffle_fit_text, verdict_text


def weight(n: int, k: int, seed: int = 0, dtype: torch.dtype = torch.float8_e4m3fn) -> torch.Tensor:
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n, k * size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    return raw.view(dtype)


def test_dtype_and_scalar_verdicts_in_words():
    w = weight(32, 128)
    assert verdict_text(compare_tensor("w", torch.zeros(32, 128, dtype=torch.bfloat16), w)) == (
        "dtype differs: observed torch.bfloat16, reference torch.float8_e4m3fn (bytes not comparable)"
    )
    assert verdict_text(compare_tensor("w", shuffle_weight(w).view(torch.uint8), w)) == (
        "shuffled once with (16, 16) (period 7) [bytes compared: torch.uint8 vs torch.float8_e4m3fn]"
    )
    assert verdict_text(compare_tensor("s", torch.tensor(2.0), torch.tensor(1.0))) == "different value"
    assert verdict_text(compare_tensor("s", torch.tensor(1.0), torch.tensor(1.0))) == (
        "plain (bytes equal the reference)"
    )


def test_unrelated_bytes_say_what_was_tried():
    assert verdict_text(compare_tensor("w", weight(48, 48, 1), weight(48, 48, 2))) == (
        "unrelated bytes (not equal; shape (48, 48) admits no shuffle to try)"
    )
    assert verdict_text(compare_tensor("w", weight(16, 64, 1), weight(16, 64, 2))) == (
        "unrelated bytes (neither plain nor 1-2 shuffles with (16, 16))"
    )


def test_shuffle_fit_in_words():
    assert shuffle_fit_text(shuffle_fit(torch.zeros(32, 64, dtype=torch.float64))) == "no: 8-byte elements"
    assert shuffle_fit_text(shuffle_fit(torch.zeros(16, 8), (32, 16))) == (
        "no: N=16 is not a multiple of 32, K=8 is not a multiple of 32"
    )
    assert shuffle_fit_text(shuffle_fit(torch.zeros(()))) == "no (0-D)"
