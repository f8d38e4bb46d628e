"""Model-side serving behaviours that decide layouts and precisions outside the kernels (set by a Scenario).

Every default is what the project modelled before versioned engine profiles existed (vLLM's order of
load steps, fp32 W_UK/W_UV, no V3 fused producer), so a scenario that names none of the newer fields
behaves exactly as before. The string-valued fields take one of the values in `CHOICES`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# How W_UK / W_UV are built from kv_b_proj's raw bytes for absorbed decode (see `model.absorbed`).
ABSORBED_WEIGHT_DTYPES = ("fp32", "bf16", "fp8-per-tensor", "fp8-per-tensor-from-bf16")
# How the absorbed-decode BMMs multiply those weights.
ABSORBED_BMMS = ("dequantized", "fp8-group-quant", "fp8-group-quant-uk")
# Where the values W_UK / W_UV start from: kv_b_proj's bytes read directly, or its kernel run on an identity.
ABSORBED_SOURCES = ("direct-read", "kernel-identity")
# The order of a load's steps (see `parallel.build`).
LOAD_ORDERS = ("standard", "remote-kv")
# When the standard loader derives W_UK / W_UV, relative to the kernels' load-time weight processing.
ABSORBED_DERIVATIONS = ("after-kernel-load", "before-kernel-load")

CHOICES: dict[str, tuple[str, ...]] = {
    "absorbed_weight_dtype": ABSORBED_WEIGHT_DTYPES,
    "absorbed_bmm": ABSORBED_BMMS,
    "absorbed_weights_via": ABSORBED_SOURCES,
    "load_order": LOAD_ORDERS,
    "absorbed_weights_derived": ABSORBED_DERIVATIONS,
}


@dataclass(frozen=True)
class ModelBehaviour:
    """What the model code (not the kernels) does.

    DeepSeek-V4:

    v4_fused_norm_quant: DeepSeek-V4 on ROCm after vLLM PR #53540 - one fused RMSNorm + group quant
        kernel hands a pre-quantized q-lora to BOTH wq_b and indexer.wq_b.
    v4_fused_transpose_scale: the scale order that producer writes (False = ROW_MAJOR, as in PR #51692).
    v4_ask_consumers: PR #56433 - ask both consumers which scale order they read; if they disagree,
        abandon the fused path for the shared unfused one.
    v4_model_preshuffle: the ROCm V4 model shuffles fused_wqa_wkv and wo_b itself and calls the
        preshuffled GEMM directly.
    skip_model_shuffle_if_kernel_preshuffles: PR #56433 - the model does not shuffle a weight its
        kernel already preshuffled.
    v4_wqa_wkv_override: whether the ROCm model's call of fused_wqa_wkv reaches its override, which multiplies
        the weight it shuffled itself through aiter's preshuffled GEMM (vLLM 0.33.0 ``models/deepseek_v4/amd/
        rocm.py``, ``DeepseekV4ROCMAiterMLAAttention._fused_wqa_wkv_gemm``). False models vLLM main between PR
        #51430, which inlined ``self.fused_wqa_wkv(hidden_states)[0]`` at the call site, and PR #51821, which
        restored the override point: the linear's own kernel reads the shuffled bytes (wo_b keeps its call).
    norm_quant_backend: which implementation runs a fused norm+quant producer, DeepSeek-V4's and
        DeepSeek-V3's (``v3_fused_norm_quant``) alike ("auto": the Triton kernel on
        NVIDIA GPUs, aiter's on ROCm, the torch reference on the CPU; or the name of a backend in
        `normquant.NORM_QUANT_BACKENDS`: "torch", "triton", "aiter", ...).
    v4_wo_a_is_bmm: whether wo_a keeps its ``is_bmm`` flag. False models DeepSeek-V4.1 on ROCm (vLLM
        0.33.0 ``models/deepseek_v41/amd/rocm.py``, ``DeepseekV41ROCMAiterMLAAttention.__init__``:
        ``self.wo_a.is_bmm = False``, so that the linear's ordinary kernel post-processes the weight),
        while the model still reads wo_a directly (``v1/attention/ops/rocm_aiter_mla_sparse.py``,
        ``_get_cached_wo_a_bf16`` and ``rocm_mxfp8_wo_a_bmm``). Applied on ROCm platforms only, as
        that class is.

    DeepSeek-V3 (MLA):

    absorbed_weight_dtype: how W_UK / W_UV are built from kv_b_proj's raw bytes for absorbed decode -
        "fp32" (the block-dequantized weight as is), "bf16" (vLLM 0.33.0: dequantized at the activation
        dtype), "fp8-per-tensor" (SGLang 0.5.23 on HIP: kv_b_proj re-quantized to one per-tensor FP8
        scale) or "fp8-per-tensor-from-bf16" (vLLM 0.33.0 with ``VLLM_ROCM_USE_AITER_FP8BMM``: the bf16
        W_UK and W_UV each re-quantized to FP8 with one scale of its own). The rules and their sources
        are in `model.absorbed`.
    absorbed_bmm: how the absorbed-decode BMMs multiply W_UK / W_UV - "dequantized" (by the weight
        values above, activations as they are), "fp8-group-quant" (SGLang 0.5.23 with aiter on gfx95,
        vLLM 0.33.0 with ``VLLM_ROCM_USE_AITER_FP8BMM``: aiter's
        ``batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant``, which quantizes the
        activation per 1x128 group inside the kernel) or "fp8-group-quant-uk" (SGLang 0.5.23 on gfx942
        under CUDA graphs: that BMM for W_UK only, W_UV multiplied dequantized). Like SGLang's own
        branch (``rocm_absorb_q_bmm`` takes it for FP8 w_kc only), the FP8 BMM runs where the weights
        are FP8 (the "fp8-per-tensor" forms of a quantized kv_b_proj); other weights are multiplied
        dequantized.
    absorbed_weights_via: where the values W_UK / W_UV are built from - "direct-read" (kv_b_proj's bytes
        read as a plain matrix times the block scales) or "kernel-identity" (vLLM 0.33.0 for a
        ``use_deep_gemm`` layer, on Hopper and Blackwell: ``get_and_maybe_dequant_weights`` runs the
        linear's own kernel on an identity matrix, so the values are those of the weight as the kernel
        holds it - re-quantized to ue8m0 for DeepGEMM - rounded to bf16 by the kernel's output).
    absorbed_weights_derived: when a standard load derives W_UK / W_UV - "after-kernel-load" (vLLM:
        ``MLAAttention.process_weights_after_loading`` runs after every linear's quant method, so it
        reads the bytes as the kernel left them) or "before-kernel-load" (SGLang: ``load_weights`` ends
        with ``post_load_weights`` before the loader's ``process_weights_after_loading``).
    load_order: "standard", or "remote-kv" - SGLang 0.5.23's ``RemoteModelLoader._load_model_from_remote_kv``
        (``srt/model_loader/loader.py``): every quant method processes its weight first, then the saved
        (already processed) state is copied in, then ``post_load_weights`` derives W_UK / W_UV from
        those bytes, whatever ``absorbed_weights_derived`` says.
    v3_fused_norm_quant: vLLM 0.33.0's compile pass ``MLADualRMSGroupQuantPattern``
        (``compilation/passes/fusion/rocm_aiter_fusion.py``): q_a_layernorm and kv_a_layernorm run as
        one ``fused_qk_rmsnorm_group_quant`` whose q output feeds q_b_proj pre-quantized.
    v3_fused_transpose_scale: the scale order that producer writes (False = ROW_MAJOR: the pass passes
        ``transpose_scale=False``).

    Both families:

    fused_scale_strided: whether a fused producer's ``transpose_scale=True`` scale carries the strides of
        its bytes, (1, M) (COL_MAJOR_STRIDED): aiter's ``fused_rms_fp8_group_quant`` after ROCm/aiter PR #4506
        returns ``.transpose(0, 1)`` of its (G, M) buffer, and SGLang 0.5.23 restrides it itself
        (``models/deepseek_v4.py`` ``_fused_rmsnorm_fp8_quant`` -> ``view_aiter_fused_rms_transposed_fp8_scale``,
        SGLang PR #31727). False: the wrapper before #4506 returns ``.view(M, G)`` - column-major bytes behind
        row-major strides (COL_MAJOR "view"), which a consumer reading by strides misreads.
    honours_rope_interleave: whether the model code rotates the RoPE pairs the checkpoint's
        ``rope_interleave`` names (True: SGLang 0.5.23, ``DeepseekV2AttentionMLA.__init__``:
        ``is_neox_style = not getattr(config, "rope_interleave", True)``). False: interleaved pairs
        whatever the config says - vLLM 0.33.0 ``models/deepseek_v2.py``, ``DeepseekV2MLAAttention.__init__``
        builds its rotary embedding with ``is_neox_style=False``; it matters only for a checkpoint with
        ``rope_interleave: false``, whose rope dimensions vLLM then pairs wrongly.
    """

    v4_fused_norm_quant: bool = False
    v4_fused_transpose_scale: bool = False
    v4_ask_consumers: bool = False
    v4_model_preshuffle: bool = False
    skip_model_shuffle_if_kernel_preshuffles: bool = False
    v4_wqa_wkv_override: bool = True
    norm_quant_backend: str = "auto"
    v4_wo_a_is_bmm: bool = True
    v3_fused_norm_quant: bool = False
    v3_fused_transpose_scale: bool = False
    absorbed_weight_dtype: str = "fp32"
    absorbed_bmm: str = "dequantized"
    absorbed_weights_via: str = "direct-read"
    absorbed_weights_derived: str = "after-kernel-load"
    load_order: str = "standard"
    honours_rope_interleave: bool = True
    fused_scale_strided: bool = False

    def __post_init__(self) -> None:
        problems = behaviour_problems(self)
        if problems:
            raise ValueError("ModelBehaviour: " + "; ".join(problems))


def behaviour_problems(behaviour: ModelBehaviour) -> list[str]:
    """Every rule `behaviour` breaks, in words (empty when it is valid): bool fields hold bools, choice
    fields one of their `CHOICES` (listed in the message). Fields are independent, so profile rules may
    set them one at a time in any order."""
    out = []
    for f in fields(behaviour):
        value = getattr(behaviour, f.name)
        if f.name in CHOICES:
            if value not in CHOICES[f.name]:
                out.append(f"{f.name}={value!r} is not one of {', '.join(repr(c) for c in CHOICES[f.name])}")
        elif isinstance(f.default, bool) and not isinstance(value, bool):
            out.append(f"{f.name}={value!r} must be a bool (true or false)")
    return out
