"""Re-quantizing a block-FP8 weight to power-of-two (ue8m0) block scales at load, as the engines do for DeepGEMM.

DeepGEMM with ue8m0 scales needs the weight's 128x128 block scales to be powers of two, so both engines
dequantize each weight with its checkpoint scales and quantize it again per 128x128 block with the scale
rounded up to a power of two (new bytes, new scales; the weight keeps its plain layout). The two recipes
differ in the precision of the intermediate and in how they round up:

- ``"vllm-0.33"``: vLLM 0.33.0 ``layers/quantization/utils/fp8_utils.py`` ``requant_weight_ue8m0_inplace`` (from
  ``deepgemm_post_process_fp8_weight_block`` when ``use_e8m0``): dequantize in fp32 (``w_q.to(float32) *
  repeat_interleave(scale)``), then ``vllm/utils/deep_gemm.py`` ``per_block_cast_to_fp8(use_ue8m0=True)``:
  ``amax = max|block| clamped to >= 1e-4``, ``sf = amax / 448``, ``sf = 2 ** ceil(log2(sf))`` in fp32 torch ops
  (``_ceil_to_ue8m0``), ``q = (x * (1 / sf)).to(e4m3fn)``.
- ``"sglang-0.5.23"``: SGLang 0.5.23 ``srt/layers/quantization/fp8_utils.py`` ``requant_weight_ue8m0``:
  dequantize to bf16 (``block_quant_dequant(..., torch.bfloat16)``), then its ``per_block_cast_to_fp8`` (copied
  from DeepGEMM): the same clamp and ``/ 448.0``, rounded up by bits (``ceil_to_ue8m0``: exponent + 1 when the
  mantissa is non-zero, clamped to exponents 1..254), ``q = (x * (1 / sf)).to(e4m3fn)``.

Both pad partial blocks with zeros (which do not move amax). The result is a new `QuantizedWeight`; the
caller's tensors are untouched (the engines re-quantize the rank's own parameter in place; here shards
are views of shared full weights).
"""

from __future__ import annotations

import torch

from ..layouts import QuantizedWeight
from ..numerics import E4M3FN

VLLM_0_33 = "vllm-0.33"
SGLANG_0_5_23 = "sglang-0.5.23"
RECIPES = (VLLM_0_33, SGLANG_0_5_23)
AMAX_FLOOR = 1e-4


def ceil_log2_pow2(scale: torch.Tensor) -> torch.Tensor:
    """vLLM's ``_ceil_to_ue8m0``: ``2 ** ceil(log2(|s|))`` in fp32 torch ops (log2 may round, so this can land
    a power of two below a scale just above one)."""
    return torch.pow(2.0, torch.ceil(torch.log2(scale.abs())))


def ceil_bits_pow2(scale: torch.Tensor) -> torch.Tensor:
    """SGLang's (DeepGEMM's) ``ceil_to_ue8m0``: the exponent field plus one when any mantissa bit is set,
    clamped to exponents 1..254, as fp32."""
    bits = scale.abs().float().view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    exponent = exponent + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exponent.clamp(1, 254) << 23).view(torch.float32)


def requant_ue8m0(weight: QuantizedWeight, recipe: str = VLLM_0_33, name: str = "weight") -> QuantizedWeight:
    """`weight` re-quantized per 128x128 block with power-of-two scales under `recipe` (see the module docstring)."""
    if recipe not in RECIPES:
        raise ValueError(f"{name}: ue8m0 re-quantization recipe {recipe!r} is not one of {', '.join(RECIPES)}")
    if weight.fmt != E4M3FN:
        raise TypeError(f"{name}: DeepGEMM re-quantizes e4m3fn weights, this one is {weight.fmt.name}")
    if tuple(weight.block) != (128, 128):
        raise ValueError(f"{name}: ue8m0 re-quantization takes 128x128 blocks, the weight has {weight.block}")
    if not weight.layout.plain or weight.data.shape[1] != weight.k:
        raise ValueError(f"{name}: re-quantization reads a plain (N, K) weight, this one is {weight.layout}")
    n, k = weight.n, weight.k
    scale = weight.scale.float().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
    values = weight.data.float() * scale
    if recipe == SGLANG_0_5_23:
        values = values.to(torch.bfloat16)
    blocks_n, blocks_k = -(-n // 128), -(-k // 128)
    padded = torch.zeros((blocks_n * 128, blocks_k * 128), dtype=values.dtype, device=values.device)
    padded[:n, :k] = values
    view = padded.view(blocks_n, 128, blocks_k, 128)
    amax = view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(AMAX_FLOOR)
    if recipe == VLLM_0_33:
        new_scale = ceil_log2_pow2(amax / E4M3FN.max)
    else:
        new_scale = ceil_bits_pow2(amax / 448.0)
    data = (view * (1.0 / new_scale)).to(E4M3FN.dtype).view(padded.shape)[:n, :k].contiguous()
    return QuantizedWeight(data, new_scale.view(blocks_n, blocks_k).contiguous(), E4M3FN, weight.layout, weight.block)
