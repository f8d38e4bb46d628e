"""mla_debug's model of vLLM 0.32 CPU's W8A16 GEMM (`kernels.vllm_cpu`) against the released op
(torch.ops._C.fp8_scaled_mm_cpu), on inputs the runner made and ran in the engine's environment.

Stated bounds: the FP8 decode is exact for all 256 codes; the GEMM is bit-exact on the op's small-M path
(M = 4) and within 0.5% relative L2 on its large-M path (M = 64), which rounds the scaled weight to bf16
and sums in oneDNN's order; the exact dequantized product is several % away from both (the decode)."""

from __future__ import annotations

import torch

from mla_debug.kernels.vllm_cpu import w8a16_decode, w8a16_mm
from mla_debug.numerics import rel_l2


def test_the_decode_of_every_e4m3_code_is_the_ops(op_checks):
    codes, out = op_checks["decode.codes"], op_checks["decode.out"]
    # out = I @ W^T: out[k, n] is weight code W[n, k], decoded by the op (scale 1, bf16 output).
    assert torch.equal(out.t().float(), w8a16_decode(codes).to(torch.bfloat16).float())
    zero = torch.zeros(1, dtype=torch.uint8).view(torch.float8_e4m3fn)
    assert w8a16_decode(zero).item() == 2.0**-7  # zero is not zero to this kernel


def test_the_gemm_is_the_ops_within_the_stated_bound(op_checks):
    w, scale = op_checks["mm.weight"], op_checks["mm.scale"]
    exact_weight = w.float() * scale.repeat_interleave(128, 0).repeat_interleave(128, 1)
    for m, bound in ((4, 0.0), (64, 5e-3)):
        x, out = op_checks[f"mm.x{m}"], op_checks[f"mm.out{m}"].float()
        assert rel_l2(w8a16_mm(x, w, scale).float(), out) <= bound, m
        assert rel_l2(x.float() @ exact_weight.t(), out) > 0.02, m  # the decode matters
