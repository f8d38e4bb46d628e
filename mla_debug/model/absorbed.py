"""W_UK / W_UV for absorbed decode: built from kv_b_proj's raw bytes the way each engine builds them, and
multiplied the way each engine's BMM multiplies them (`ModelBehaviour.absorbed_weight_dtype` and
``absorbed_bmm``).

Every engine starts from one read: kv_b_proj's bytes taken as a plain (N, K) matrix and multiplied by
their 128x128 block scales in fp32 (`QuantizedLinear.read_direct`, "direct-read"), or the linear's own
kernel run on an identity ("kernel-identity", `identity_read`; ``ModelBehaviour.absorbed_weights_via``).
`build_absorbed_weights` then keeps, rounds or re-quantizes those values by ``absorbed_weight_dtype``:

- ``"fp32"``: the fp32 product as is, multiplied in fp32 - no engine's; the yardstick of the others;
- ``"bf16"``: rounded once to bf16 - vLLM 0.33.0, and SGLang 0.5.23 on CUDA without its DeepGEMM BMM;
- ``"fp8-per-tensor"``: re-quantized with one scale for the rank's whole tensor - SGLang 0.5.23 on HIP
  (`requantize_per_tensor`);
- ``"fp8-per-tensor-from-bf16"``: the bf16 W_UK and W_UV each re-quantized with a scale of its own, in bf16 -
  vLLM 0.33.0 with ``VLLM_ROCM_USE_AITER_FP8BMM=1`` and aiter on (`requantize_per_tensor_bf16`);

and `AbsorbedWeights` multiplies them by ``absorbed_bmm``: ``"dequantized"`` (a plain BMM of the weights'
values), ``"fp8-group-quant"`` (aiter's Triton FP8 BMM, `group_quant_bmm`) or ``"fp8-group-quant-uk"`` (that
BMM for W_UK only). Each function cites the engine code it reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import describe
from ..numerics import E4M3FNUZ, Fp8Format

# SGLang's fp8_max on e4m3fnuz (kernels/ops/quantization/fp8_kernel.py): 224, not the format's 240.
SGLANG_FNUZ_MAX = 224.0
# input_to_float8's amax floor.
PER_TENSOR_AMAX_FLOOR = 1e-12
# The in-kernel activation quant of aiter's batched FP8 GEMM: its amax floor and group width.
BMM_AMAX_FLOOR = 1e-10
BMM_GROUP = 128


def per_tensor_fp8_max(fmt: Fp8Format) -> float:
    """The bound SGLang's ``input_to_float8`` quantizes to: 224 on e4m3fnuz, the format's max otherwise."""
    return SGLANG_FNUZ_MAX if fmt is E4M3FNUZ else fmt.max


def requantize_per_tensor(values: torch.Tensor, fmt: Fp8Format) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 codes, fp32 0-dim scale) of `values` re-quantized with one scale, as SGLang 0.5.23 does on HIP
    (``absorbed_weight_dtype="fp8-per-tensor"``); ``codes * scale ~= values``.

    ``srt/models/deepseek_common/deepseek_weight_loader.py``, ``post_load_weights``: a 128x128-block FP8
    kv_b_proj off CUDA/MUSA/XPU goes through ``block_quant_to_tensor_quant``
    (``srt/layers/quantization/fp8_utils.py``): every block dequantized in fp32, then ``input_to_float8``
    re-quantizes the whole (per-rank) tensor with ONE scale - amax of |x| (floor 1e-12), ``fp_max`` 224 on
    e4m3fnuz (``kernels/ops/quantization/fp8_kernel.py``) else the format's max, ``scale = fp_max / amax``
    (torch evaluates a float divided by a tensor as the tensor's reciprocal times the float),
    ``q = clamp(x * scale, +-fp_max)`` cast to fp8, and the stored scale ``1 / scale``. w_kc and w_vc are
    views of that one tensor and share the scale. An unquantized kv_b_proj is not re-quantized (the branch
    needs an FP8 weight): it is multiplied as its bf16 values.
    """
    if not values.is_floating_point() or values.numel() == 0:
        raise ValueError(f"per-tensor re-quantization: {describe(values)} must be a non-empty float tensor")
    bound = per_tensor_fp8_max(fmt)
    low, high = values.aminmax()
    amax = torch.maximum(low.abs(), high.abs()).to(torch.float32).clamp(min=PER_TENSOR_AMAX_FLOOR)
    multiplier = torch.reciprocal(amax) * bound
    codes = (values.to(torch.float32) * multiplier).clamp(min=-bound, max=bound).to(fmt.dtype)
    return codes, torch.reciprocal(multiplier)


# dynamic_per_batched_tensor_quant's amax floor.
BF16_PER_TENSOR_AMAX_FLOOR = 1e-10


def requantize_per_tensor_bf16(values: torch.Tensor, fmt: Fp8Format) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 codes, fp32 0-dim scale) of bf16 `values` re-quantized with one scale, every step in bf16, as
    vLLM 0.33.0's ``dynamic_per_batched_tensor_quant`` does (``absorbed_weight_dtype=
    "fp8-per-tensor-from-bf16"``); ``codes * scale ~= values``.

    ``MLAAttention.process_weights_after_loading`` (``layers/attention/mla_attention.py``), with
    ``VLLM_ROCM_USE_AITER_FP8BMM=1`` and aiter on, takes the bf16 W_UK / W_UV of ``split_kv_b_proj`` and
    re-quantizes EACH: one scale for the whole per-rank tensor (``x.aminmax()`` over every head, despite the
    name), with the fp8 dtype's own max (``torch.finfo``: 240 on e4m3fnuz, not the 224 elsewhere), all in
    the tensor's bf16: ``amax = max(|min|, |max|).clamp(min=1e-10)`` (bf16), ``scale = max / amax`` (a Python
    float over a bf16 0-dim tensor: the reciprocal rounded to bf16, times max, rounded to bf16),
    ``q = clamp(x * scale, +-max)`` (bf16) cast to fp8, and the stored scale ``scale.float().reciprocal()``.
    The amax runs over the rank's heads, so the bytes depend on the TP size. The decode BMMs are aiter's
    ``triton_fp8_bmm`` (`group_quant_bmm`).
    """
    if values.dtype != torch.bfloat16 or values.numel() == 0:
        raise ValueError(f"per-tensor re-quantization from bf16: {describe(values)} must be a non-empty bf16 tensor")
    bound = fmt.max
    low, high = values.aminmax()
    amax = torch.maximum(low.abs(), high.abs()).clamp(min=BF16_PER_TENSOR_AMAX_FLOOR)  # bf16
    # A Python float over a tensor is the tensor's reciprocal times the float, each rounded to bf16.
    multiplier = torch.reciprocal(amax) * bound
    codes = (values * multiplier).clamp(min=-bound, max=bound).to(fmt.dtype)
    return codes, torch.reciprocal(multiplier.to(torch.float32))


@dataclass(frozen=True)
class AbsorbedWeights:
    """W_UK (h, P, Lkv) and W_UV (h, V, Lkv) of one rank, as absorbed decode multiplies them.

    ``w_uk`` / ``w_uv`` hold fp32 values: the weights themselves, or - for the FP8 BMM - the fp8
    codes (exact in fp32) with ``scale`` the per-tensor scale that multiplies them and ``fmt`` their
    format.
    """

    w_uk: torch.Tensor
    w_uv: torch.Tensor
    bmm: str = "dequantized"
    scale: torch.Tensor | None = None
    fmt: Fp8Format | None = None
    # W_UV's own BMM and scale where they are not W_UK's (None: as W_UK's).
    bmm_uv: str | None = None
    scale_uv: torch.Tensor | None = None

    def absorb_uk(self, q_nope: torch.Tensor) -> torch.Tensor:
        """q_nope (M, h, P) -> (M, h, Lkv) in fp32 (the caller rounds to the activation dtype)."""
        return self._bmm(q_nope, self.w_uk, "mhp,hpc->mhc", 1, self.bmm, self.scale)

    def absorb_uv(self, attn_latent: torch.Tensor) -> torch.Tensor:
        """attention output over the latent cache (M, h, Lkv) -> (M, h, V) in fp32."""
        bmm = self.bmm_uv or self.bmm
        scale = self.scale_uv if self.scale_uv is not None else self.scale
        return self._bmm(attn_latent, self.w_uv, "mhc,hvc->mhv", 2, bmm, scale)

    def _bmm(
        self, x: torch.Tensor, w: torch.Tensor, equation: str, reduce_dim: int, bmm: str, scale: torch.Tensor | None
    ) -> torch.Tensor:
        if bmm == "dequantized":
            return torch.einsum(equation, x.to(torch.float32), w)
        return group_quant_bmm(x, w, scale, self.fmt, reduce_dim)


def group_quant_bmm(
    x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format, reduce_dim: int
) -> torch.Tensor:
    """x (M, h, K) times per-tensor FP8 weights `codes` (h, ., .) reduced over their axis `reduce_dim`
    (1 or 2) in K, with x quantized per 1x128 group of K inside the kernel; fp32 (M, h, N).

    aiter's Triton ``batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant`` with
    ``group_size=128`` (``_triton_kernels/batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant.py``):
    per head, token and 128-wide group of K, ``s = max(max|x|, 1e-10) * (1/max)`` (fp32; ``max`` is the
    weight format's), ``q = clamp(x * (1/s), +-max)`` cast to fp8, the group's fp8 dot product in fp32 times
    ``s`` summed over groups, times the weight scale, rounded to bf16. SGLang 0.5.23 on HIP calls it from
    ``attention_forward_methods/forward_mla_rocm.py`` (``rocm_absorb_q_bmm`` / ``rocm_absorb_v_bmm``, aiter
    on gfx95 with e4m3fn weights), vLLM 0.33.0 as ``triton_fp8_bmm``. It multiplies FP8 weights only (SGLang
    branches on ``w_kc.dtype``): other weights are multiplied dequantized.
    """
    m, h, k = x.shape
    if k % BMM_GROUP:
        raise ValueError(f"absorbed FP8 BMM: K={k} of {describe(x)} is not a multiple of {BMM_GROUP}")
    groups = x.reshape(m, h, k // BMM_GROUP, BMM_GROUP).to(torch.float32)
    amax = groups.abs().amax(dim=-1, keepdim=True).clamp(min=BMM_AMAX_FLOOR)
    # 1/max is a compile-time constant of the kernel: the double quotient rounded to fp32.
    act_scale = amax * torch.tensor(1.0 / fmt.max, dtype=torch.float32)
    q = (groups * torch.reciprocal(act_scale)).clamp(min=-fmt.max, max=fmt.max).to(fmt.dtype)
    q = q.to(torch.float32)  # exact
    # (h, N, K) view of the weight: K is the reduced axis.
    w = codes if reduce_dim == 2 else codes.transpose(1, 2)
    w = w.reshape(h, w.shape[1], k // BMM_GROUP, BMM_GROUP)
    partial = torch.einsum("mhgk,hngk->mhgn", q, w)  # each group's dot product in fp32
    acc = (partial * act_scale).sum(dim=2)
    return acc * scale


def build_absorbed_weights(
    weight: torch.Tensor,
    heads: int,
    nope: int,
    v_dim: int,
    lora: int,
    dtype: str,
    bmm: str = "dequantized",
    fmt: Fp8Format | None = None,
) -> AbsorbedWeights:
    """W_UK / W_UV from kv_b_proj's read fp32 (N, K) = (h * (P + V), Lkv) values under `dtype` (an
    ``absorbed_weight_dtype``), multiplied by `bmm` (an ``absorbed_bmm``); `fmt` is the weight's FP8 format,
    None for an unquantized kv_b_proj.

    ``"bf16"`` is vLLM 0.33.0's ``model_executor/layers/attention/mla_attention.py``:
    ``MLAAttention.process_weights_after_loading(act_dtype)`` calls ``split_kv_b_proj(kv_b_proj, act_dtype,
    ...)``, which takes ``get_and_maybe_dequant_weights(kv_b_proj, out_dtype=act_dtype)``
    (``model_executor/layers/quantization/utils/quant_utils.py``); for a block-FP8 ``Fp8LinearMethod`` that is
    ``scaled_dequantize``: the fp32 product of each fp8 value and its block scale, rounded ONCE to the
    activation dtype (bf16 for the DeepSeek checkpoints; ``model_config.dtype`` is what
    ``model_loader/utils.py``'s ``process_weights_after_loading`` passes). The decode BMMs
    (``forward_impl``'s ``torch.bmm(mqa_q_nope, W_UK_T)``, ``_v_up_proj``'s ``torch.bmm(x, W_UV)``) take bf16
    operands, accumulate in fp32 and write bf16: the same values as an fp32 product of the bf16-rounded
    operands rounded once at the end, up to the order of the fp32 sum. The aiter FP4 BMM behind
    ``VLLM_ROCM_USE_AITER_FP4BMM`` (off by default, and for an unquantized kv_b_proj only) is not modelled.
    SGLang 0.5.23 on CUDA without its DeepGEMM BMM builds the same bf16 weights (``post_load_weights`` ->
    ``block_quant_dequant(..., torch.bfloat16)``: the fp32 product rounded once) and multiplies them with
    ``torch.bmm`` (``forward_mla.py``).

    Under ``"fp8-per-tensor"`` SGLang 0.5.23's ``rocm_absorb_q_bmm`` / ``rocm_absorb_v_bmm``
    (``attention_forward_methods/forward_mla_rocm.py``) multiply either ``"dequantized"`` (without aiter on
    gfx95; eager on gfx942: ``torch.bmm(x.to(bf16), _absorb_weight_bf16(w, w_scale))``, the weight being
    ``w.to(bf16) * w_scale`` - a bf16 tensor times a 0-dim fp32 tensor, so a bf16 result) or with the FP8
    BMM (`group_quant_bmm`). ``"fp8-group-quant-uk"`` is SGLang 0.5.23 on gfx942 under CUDA graphs:
    ``rocm_absorb_q_bmm`` takes the FP8 BMM when ``is_capture_mode and w_kc.dtype == float8_e4m3fnuz``
    (every captured decode replays it), while ``rocm_absorb_v_bmm`` takes it only for ``_use_aiter_gfx95`` and
    e4m3fn, so W_UV is multiplied as bf16 (``w.to(bf16) * w_scale``).
    """
    if tuple(weight.shape) != (heads * (nope + v_dim), lora):
        raise ValueError(
            f"kv_b_proj: directly read weight {describe(weight)} is not (heads*(P+V), Lkv) = "
            f"({heads * (nope + v_dim)}, {lora})"
        )
    if dtype not in ("fp32", "bf16", "fp8-per-tensor", "fp8-per-tensor-from-bf16"):
        raise ValueError(
            f"absorbed_weight_dtype {dtype!r} is not 'fp32', 'bf16', 'fp8-per-tensor' or 'fp8-per-tensor-from-bf16'"
        )
    if dtype == "fp8-per-tensor-from-bf16" and fmt is not None:
        return _per_tensor_each_from_bf16(weight, heads, nope, v_dim, lora, bmm, fmt)
    scale = None
    if dtype == "fp32":
        values = weight.to(torch.float32)
    elif dtype in ("bf16", "fp8-per-tensor-from-bf16") or (dtype == "fp8-per-tensor" and fmt is None):
        values = weight.to(torch.bfloat16).to(torch.float32)
    else:
        codes, scale = requantize_per_tensor(weight, fmt)
        if bmm == "dequantized":
            values = (codes.to(torch.bfloat16) * scale).to(torch.float32)
        else:
            values = fmt.decode(codes)
    per_head = values.view(heads, nope + v_dim, lora)
    w_uk, w_uv = per_head[:, :nope], per_head[:, nope:]
    if bmm == "fp8-group-quant" and scale is not None:
        return AbsorbedWeights(w_uk, w_uv, bmm, scale, fmt)
    if bmm == "fp8-group-quant-uk" and scale is not None:
        # W_UV as SGLang's bf16 branch multiplies it: the codes in bf16 times the scale
        w_uv_bf16 = (fmt.decode(codes).view(heads, nope + v_dim, lora)[:, nope:].to(torch.bfloat16) * scale).float()
        return AbsorbedWeights(w_uk, w_uv_bf16, "fp8-group-quant", scale, fmt, bmm_uv="dequantized")
    return AbsorbedWeights(w_uk, w_uv)


def _per_tensor_each_from_bf16(
    weight: torch.Tensor, heads: int, nope: int, v_dim: int, lora: int, bmm: str, fmt: Fp8Format
) -> AbsorbedWeights:
    """vLLM's FP8 BMM weights: the bf16 W_UK and W_UV, each re-quantized with its own per-tensor scale."""
    per_head = weight.to(torch.bfloat16).view(heads, nope + v_dim, lora)
    uk_codes, uk_scale = requantize_per_tensor_bf16(per_head[:, :nope], fmt)
    uv_codes, uv_scale = requantize_per_tensor_bf16(per_head[:, nope:], fmt)
    if bmm == "dequantized":
        return AbsorbedWeights(fmt.decode(uk_codes) * uk_scale, fmt.decode(uv_codes) * uv_scale)
    uv_bmm = "dequantized" if bmm == "fp8-group-quant-uk" else "fp8-group-quant"
    w_uv = fmt.decode(uv_codes) * uv_scale if uv_bmm == "dequantized" else fmt.decode(uv_codes)
    return AbsorbedWeights(
        fmt.decode(uk_codes), w_uv, "fp8-group-quant", uk_scale, fmt, bmm_uv=uv_bmm, scale_uv=uv_scale
    )


def identity_read(linear, dtype: torch.dtype = torch.bfloat16):
    """kv_b_proj's weight as vLLM 0.33.0's ``get_and_maybe_dequant_weights`` gives it for a ``use_deep_gemm``
    layer: the linear's own kernel run on ``eye(K)`` in `dtype`, transposed - fp32 (N, K) holding the kernel's
    bf16 outputs - and the call (its kernel, layouts and broken contracts).

    vLLM 0.33.0's ``Fp8LinearMethod`` sets ``use_deep_gemm = is_deep_gemm_supported()``
    (``layers/quantization/fp8.py``: Hopper or Blackwell, ``VLLM_USE_DEEP_GEMM`` on, deep_gemm installed), and
    for such a layer ``get_and_maybe_dequant_weights`` skips ``scaled_dequantize`` and returns
    ``quant_method.apply(layer, eye(K, dtype=bf16)).T`` ("kernel-identity"). That kernel has already
    processed the weight at load - DeepGEMM re-quantizes it to ue8m0 block scales in place (``fp8_utils.py``
    ``requant_weight_ue8m0_inplace``) - so W_UK / W_UV are bf16 copies of the re-quantized weight, as the
    kernel's input quant, block accumulation and bf16 output make them (on an identity every output is one
    product: exact under ue8m0, where the identity's group scale is a power of two).
    """
    # On the weight's device: a layer run on a GPU holds its weights there.
    eye = torch.eye(linear.k, dtype=dtype, device=linear.block.weight.data.device)
    call = linear.run(eye)
    return call.output.t().to(torch.float32), call
