"""The model of vLLM 0.32 CPU's W8A16 kernel (`kernels.vllm_cpu`) against definitions written here; the
engine tier (tests/engine/test_w8a16_kernel.py) holds it to the released op itself."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mla_debug as md
from mla_debug.kernels.vllm_cpu import VllmCpuW8A16Kernel, w8a16_decode, w8a16_mm

CODES = torch.arange(256, dtype=torch.int64).to(torch.uint8).view(torch.float8_e4m3fn)


def test_normal_codes_decode_exactly_and_exponent_zero_codes_as_normals():
    decoded = w8a16_decode(CODES)
    bits = torch.arange(256)
    normal = ((bits >> 3) & 0xF) > 0
    finite = (bits & 0x7F) != 0x7F
    assert torch.equal(decoded[normal & finite], CODES.float()[normal & finite])
    # exponent field 0: 2^-7 * (1 + m/8) with the code's sign, zero included
    for code in (0, 1, 7, 128, 135):
        mantissa, sign = code & 7, -1.0 if code >= 128 else 1.0
        assert decoded[code].item() == sign * 2.0**-7 * (1 + mantissa / 8)
    assert decoded[0x7F].item() == 480.0 and decoded[0xFF].item() == -480.0


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2**16))
def test_the_gemm_is_the_blockwise_sum_of_the_decoded_weight(m, nb, kb, seed):
    gen = torch.Generator().manual_seed(seed)
    n, k = 32 * nb, 128 * kb
    w = torch.randint(0, 256, (n, k), dtype=torch.uint8, generator=gen)
    w[(w & 0x7F) == 0x7F] = 0  # no NaN codes
    w = w.view(torch.float8_e4m3fn)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    scale = torch.rand(-(-n // 128), kb, generator=gen) + 0.5
    expected = torch.zeros(m, n, dtype=torch.float64)
    rows = scale.repeat_interleave(128, 0)[:n].double()
    for b in range(kb):
        part = x[:, b * 128 : (b + 1) * 128].double() @ w8a16_decode(w[:, b * 128 : (b + 1) * 128]).double().t()
        expected += part * rows[:, b]
    got = w8a16_mm(x, w, scale).double()
    assert got.dtype == torch.float64 and got.shape == (m, n)
    assert md.numerics.rel_l2(got, expected) < 1e-2  # bf16 output rounding over fp32 sums


def test_bad_operands_are_named():
    w = torch.zeros(64, 256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"o_proj: input .*shape \(2, 128\).* need one K"):
        w8a16_mm(torch.zeros(2, 128), w, torch.ones(1, 2), name="o_proj")
    with pytest.raises(ValueError, match=r"o_proj: block scale shape \(2, 2\).*does not fit"):
        w8a16_mm(torch.zeros(2, 256), w, torch.ones(2, 2), name="o_proj")
    with pytest.raises(TypeError, match="fp8 codes"):
        w8a16_decode(torch.zeros(4))


def test_the_kernel_takes_the_policy_shapes_and_keeps_kv_b_proj_plain():
    kernel = VllmCpuW8A16Kernel()
    assert kernel.packs("model.layers.1.self_attn.o_proj") and not kernel.packs("kv_b_proj")
    assert md.kernels.KERNELS.get("CPUFp8BlockScaledMMKernel") is VllmCpuW8A16Kernel
