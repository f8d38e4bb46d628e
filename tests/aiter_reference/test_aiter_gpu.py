"""aiter's Triton kernels compiled on a CUDA GPU against our emulations and our Triton kernels.

Run by benchmarks/run_gpu_checks.sh (with amd-aiter installed); skipped without CUDA. On NVIDIA GPUs
Triton compiles ``/`` and ``rsqrt`` to approximate instructions (``div.full.f32``, ``rsqrt.approx.f32``:
within 2 ulps), where ROCm and the interpreter round correctly, so aiter's own Triton code does not
reproduce its ROCm bits exactly there; these checks bound that instead of asking for equality:
- a scale within 2 ulps of the flavor's where aiter divides once (the per-token quant), an fp8 byte
  within one code of ours;
- the fused norm + quant within (n / 2 + 16) u of ours per group scale (the fp32 sum of squares, the
  approximate rsqrt and divisions), one code per byte, one bf16 ulp per normalized value;
- the GEMM, whose arithmetic has no division, bit for bit where fp32 is exact, and within the fp32 +
  tensor-core bound on DeepSeek-V3 shapes;
- a DeepSeek-V3 triage on the GPU with aiter's Triton GEMM in PR #51692's plain-kernel slot finds the
  kv_b_proj defect at TP4 decode, as the emulations do - from our preshuffled kernel: at TP4 no layer runs
  aiter's GEMM (test_triage_through_aiter has the triage whose diverging step aiter's kernel consumes).
No hypothesis here: the GPU image lacks it.
"""

from __future__ import annotations

import pytest
import torch
from aiter_ref import require_aiter
from quant_inputs import activations
from test_gemm_vs_aiter import emulate, exact_and_bound, exact_operands, random_operands

import mla_debug as md
from mla_debug.gpu import aiter_triton
from mla_debug.normquant import fused_qk_rmsnorm_group_quant
from mla_debug.real_aiter import functions

pytestmark = pytest.mark.gpu
U = 2.0**-24


def _ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.contiguous().view(torch.int32).long() - b.contiguous().view(torch.int32).long()).abs()


def _codes(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ab, bb = a.view(torch.uint8).int(), b.view(torch.uint8).int()
    same_sign = (ab & 0x80) == (bb & 0x80)
    return torch.where(same_sign, ((ab & 0x7F) - (bb & 0x7F)).abs(), (ab & 0x7F) + (bb & 0x7F))


@pytest.mark.parametrize("seed", range(3))
def test_aiter_triton_quant_compiled(seed):
    require_aiter()
    x = activations(512, 8, seed).cuda()
    q, scale = functions.triton_group_quant("gfx950")(x, quant_dtype=torch.float8_e4m3fn)
    ours = md.quantize_groups(x, fmt="e4m3fn", flavor="aiter-triton")
    finite = scale.isfinite() & (scale > 0)
    assert _ulps(scale[finite], ours.scale[finite]).max() <= 2
    assert torch.equal(scale == 0, ours.scale == 0)  # all-zero groups: scale 0 on both
    both_finite = ~q.float().isnan() & ~ours.data.float().isnan()
    assert torch.equal(q.float().isnan(), ours.data.float().isnan())
    assert _codes(q[both_finite], ours.data[both_finite]).max() <= 1


@pytest.mark.parametrize(("n1", "n2"), [(1024, 512), (1536, 512)])
@pytest.mark.parametrize("m", [1, 64, 4096])
@pytest.mark.parametrize("transpose", [False, True])
def test_fused_norm_quant_compiled(n1, n2, m, transpose):
    require_aiter()
    gen = torch.Generator().manual_seed(m + n1)
    q = (torch.randn(m, n1 + n2, generator=gen) * 3).to(torch.bfloat16).cuda()
    qr, kv = q.split([n1, n2], dim=1)
    qw = (torch.rand(n1, generator=gen) + 0.5).to(torch.bfloat16).cuda()
    kw = (torch.rand(n2, generator=gen) + 0.5).to(torch.bfloat16).cuda()
    kwargs = dict(transpose_scale=transpose, return_unquantized=True)
    theirs = fused_qk_rmsnorm_group_quant(qr, qw, 1e-6, kv, kw, backend="aiter-triton", **kwargs)
    ours = fused_qk_rmsnorm_group_quant(qr, qw, 1e-6, kv, kw, backend="triton", **kwargs)
    a, b = theirs.q_quant.logical_scale().double(), ours.q_quant.logical_scale().double()
    assert ((a - b).abs() <= b * (n1 / 2 + 16) * U).all()
    assert _codes(theirs.q_quant.data, ours.q_quant.data).max() <= 1
    for name in ("q_unquantized", "k_normed"):
        x, y = getattr(theirs, name), getattr(ours, name)
        assert (x.view(torch.int16).int() - y.view(torch.int16).int()).abs().max() <= 1, name


@pytest.mark.parametrize(("m", "n", "k"), [(1, 2112, 7168), (16, 3072, 1536), (300, 4096, 512)])
def test_gemm_exact_data_bit_for_bit(m, n, k):
    require_aiter()
    x, w, xs, ws = exact_operands(m, n, k, seed=m)
    theirs = aiter_triton.gemm_a8w8_blockscale(x.cuda(), w.cuda(), xs.cuda(), ws.cuda(), "gfx950").cpu()
    assert torch.equal(theirs.view(torch.int16), emulate(x, w, xs, ws, "blockwise").view(torch.int16))


@pytest.mark.parametrize(
    ("n", "k"), [(24576, 1536), (3072, 1536), (32768, 512), (7168, 16384), (7168, 2048), (2112, 7168)]
)
@pytest.mark.parametrize("m", [1, 64, 1024])
def test_gemm_deepseek_v3_shapes_within_the_bound(n, k, m):
    require_aiter()
    x, w, xs, ws = random_operands(m, n, k, seed=n + m)
    theirs = aiter_triton.gemm_a8w8_blockscale(x.cuda(), w.cuda(), xs.cuda(), ws.cuda(), "gfx950").cpu()
    exact, bound = exact_and_bound(x, w, xs, ws)
    assert ((theirs.double() - exact).abs() <= bound).all()


def test_deepseek_v3_triage_with_aiters_gemm_in_the_plain_slot_finds_our_kernels_kv_b_proj_defect():
    require_aiter()
    scen = md.scenario(
        {
            "name": "pr51692-aiter-triton-gemm",
            "base": "vllm-pr51692",
            "priority": ["triton-bpreshuffle", "aiter-triton-blockscale", "torch-reference"],
        }
    )
    result = md.triage("deepseek-v3", "h200", scen, tp_sizes=(1, 4), modes=("decode",), tokens=8, progress=False)
    assert result.device == "cuda"
    aiters = {
        c.tp: sorted(name for name, choice in c.diff.run.kernels.items() if choice.kernel == "aiter-triton-blockscale")
        for c in result.configs
    }
    assert aiters == {1: ["kv_b_proj", "q_b_proj"], 4: []}  # aiter's GEMM runs only where the preshuffle refuses
    assert [(c.tp, c.mode) for c in result.configs if c.verdict == "diverged"] == [(4, "decode")]
    assert [c.layer for c in result.culprits] == ["kv_b_proj"]
    assert result.config(4, "decode").diff.run.kernels["kv_b_proj"].kernel == "triton-bpreshuffle"
