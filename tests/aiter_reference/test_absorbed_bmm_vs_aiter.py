"""The FP8 absorbed-decode BMM (`model.absorbed.group_quant_bmm`) against aiter's own Triton
``batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant``, which SGLang 0.5.23 calls with
aiter on gfx95 (``forward_mla_rocm.py``, ``rocm_absorb_q_bmm`` / ``rocm_absorb_v_bmm``).

Both quantize each activation group the same way and accumulate the groups' fp32 dot products times
their scales, then multiply by the weight scale and round to bf16. They differ only in the order of the
fp32 sums (aiter's ``tl.dot`` in tiles, ours a whole-group sum): with integer codes and power-of-two
scales every fp32 operation is exact and the two are bitwise equal; on random data each is within
``ulp_bf16(|y|) + (128 + G + 2) u S`` of the float64 result of the same quantized operands (u = 2^-24,
S the sum of |products|, G the number of groups), the bound the block-scaled GEMM checks use.
"""

from __future__ import annotations

import pytest
import torch
from aiter_ref import assert_same_bits, require_aiter, triton_device, triton_semantics

import mla_debug as md
from mla_debug.model.absorbed import group_quant_bmm
from mla_debug.real_aiter import load_module

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

MODULE = "aiter.ops.triton.batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant"
OP = "batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant"
U = 2.0**-24
# A tile config like the ones SGLang passes (_absorb_bmm_config), without the AMD-only launch options.
CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "GROUP_SIZE_M": 1, "cache_modifier": "", "num_warps": 4}


def run_aiter(x: torch.Tensor, w_codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """aiter's kernel on x (M, B, K) bf16 (``transpose_bm_in=True``, as SGLang passes q_nope) and WQ
    (B, N, K) fp8; returns (M, B, N) bf16."""
    device = triton_device()
    op = getattr(load_module(MODULE, "gfx950"), OP)
    with triton_semantics():
        out = op(
            x.to(device),
            w_codes.to(device),
            scale.reshape(1).to(device),
            group_size=128,
            dtype=torch.bfloat16,
            transpose_bm=True,
            transpose_bm_in=True,
            config=dict(CONFIG),
        )
    return out.cpu()


def ours(x: torch.Tensor, w_codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    fmt = md.numerics.fp8_format(w_codes.dtype)
    return group_quant_bmm(x, fmt.decode(w_codes), scale, fmt, reduce_dim=2).to(torch.bfloat16)


def test_exact_arithmetic_agrees_bitwise():
    require_aiter()
    gen = torch.Generator().manual_seed(0)
    m, b, n, k = 5, 2, 32, 256
    codes = torch.randint(-8, 9, (m, b, k), generator=gen).float()
    codes[..., ::128] = 448.0  # each group's amax is the bound: its scale is a power of two
    x = (codes * 2.0**-9).to(torch.bfloat16)
    w = torch.randint(-6, 7, (b, n, k), generator=gen).float().to(torch.float8_e4m3fn)
    scale = torch.tensor(2.0**-4)
    assert_same_bits(ours(x, w, scale), run_aiter(x, w, scale), "exact operands")


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("m", "b", "n", "k"), [(4, 2, 32, 128), (3, 2, 64, 512)])
def test_random_data_within_the_bound(seed, m, b, n, k):
    require_aiter()
    gen = torch.Generator().manual_seed(seed)
    fmt = md.E4M3FN
    x = torch.randn(m, b, k, generator=gen).to(torch.bfloat16)
    w = (torch.randn(b, n, k, generator=gen) * 100).clamp(-448, 448).to(fmt.dtype)
    scale = torch.tensor(3e-4)
    # The quantized operands both use, in float64 (the activation quant is the kernel's: checked exact
    # above), and the bound of the module docstring.
    groups = x.float().reshape(m, b, k // 128, 128)
    act_scale = groups.abs().amax(-1, keepdim=True).clamp(min=1e-10) * torch.tensor(1 / 448, dtype=torch.float32)
    q = (groups * torch.reciprocal(act_scale)).clamp(-448, 448).to(fmt.dtype).float()
    xq = (q.double() * act_scale.double()).reshape(m, b, k)
    wv = fmt.decode(w).double()
    exact = torch.einsum("mbk,bnk->mbn", xq, wv) * scale.double()
    s = torch.einsum("mbk,bnk->mbn", xq.abs(), wv.abs()) * scale.double()
    bound = torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(1e-30))) - 7) + (128 + k // 128 + 2) * U * s
    for name, y in (("aiter", run_aiter(x, w, scale)), ("ours", ours(x, w, scale))):
        excess = (y.double() - exact).abs() - bound
        assert (excess <= 0).all(), f"{name}: {int((excess > 0).sum())} outputs beyond the bound"


def test_vllms_call_of_the_same_kernel_agrees_bitwise():
    """vLLM 0.33.0's ``rocm_aiter_ops.triton_fp8_bmm`` (``VLLM_ROCM_USE_AITER_FP8BMM``) calls the same kernel with
    the heads first - X (N heads, B tokens, K), ``transpose_bm=True``, ``transpose_bm_in`` left False - and reads
    the output as (B, N, ...) (``mla_attention.py``, ``forward_impl`` and ``_v_up_proj``)."""
    require_aiter()
    gen = torch.Generator().manual_seed(1)
    m, b, n, k = 3, 2, 32, 512  # the v side: K = kv_lora_rank, four groups
    codes = torch.randint(-8, 9, (b, m, k), generator=gen).float()
    codes[..., ::128] = 448.0
    x = (codes * 2.0**-7).to(torch.bfloat16)
    w = torch.randint(-6, 7, (b, n, k), generator=gen).float().to(torch.float8_e4m3fn)
    scale = torch.tensor(2.0**-3)
    device = triton_device()
    op = getattr(load_module(MODULE, "gfx950"), OP)
    with triton_semantics():
        theirs = op(
            x.to(device),
            w.to(device),
            scale.to(device),
            group_size=128,
            dtype=torch.bfloat16,
            transpose_bm=True,
            config=dict(CONFIG),
        ).cpu()
    assert tuple(theirs.shape) == (m, b, n)
    assert_same_bits(ours(x.transpose(0, 1), w, scale), theirs, "vLLM's call")
