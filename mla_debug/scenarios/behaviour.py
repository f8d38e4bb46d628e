"""Model-side serving behaviours that decide layouts outside the kernels (set by a Scenario)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelBehaviour:
    """What the model code (not the kernels) does.

    v4_fused_norm_quant: DeepSeek-V4 on ROCm after vLLM PR #53540 - one fused RMSNorm + group quant
        kernel hands a pre-quantized q-lora to BOTH wq_b and indexer.wq_b.
    v4_fused_transpose_scale: the scale order that producer writes (False = ROW_MAJOR, as in PR #51692).
    v4_ask_consumers: PR #56433 - ask both consumers which scale order they read; if they disagree,
        abandon the fused path for the shared unfused one.
    v4_model_preshuffle: the ROCm V4 model shuffles fused_wqa_wkv and wo_b itself and calls the
        preshuffled GEMM directly.
    skip_model_shuffle_if_kernel_preshuffles: PR #56433 - the model does not shuffle a weight its
        kernel already preshuffled.
    v4_norm_quant_backend: which implementation runs the fused producer ("auto": the Triton kernel on
        NVIDIA GPUs, aiter's on ROCm, the torch reference on the CPU; or the name of a backend in
        `normquant.NORM_QUANT_BACKENDS`: "torch", "triton", "aiter", ...).
    """

    v4_fused_norm_quant: bool = False
    v4_fused_transpose_scale: bool = False
    v4_ask_consumers: bool = False
    v4_model_preshuffle: bool = False
    skip_model_shuffle_if_kernel_preshuffles: bool = False
    v4_norm_quant_backend: str = "auto"
