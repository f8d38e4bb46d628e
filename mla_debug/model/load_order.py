"""When the model's load-time readers run relative to the kernels' load-time weight processing.

DeepSeek-V3's absorbed decode multiplies by W_UK / W_UV, which both engines derive ONCE, at load, from
kv_b_proj's raw bytes. Whether those bytes are still the checkpoint's depends on when that happens:

- vLLM 0.33.0 (``model_executor/model_loader/utils.py``, ``process_weights_after_loading``): every
  linear's quant method processes its weight first, then ``MLAAttention.process_weights_after_loading``
  derives W_UK / W_UV - after the kernels ("after-kernel-load", the default);
- SGLang 0.5.23, standard loader (``srt/model_loader/loader.py``, ``DefaultModelLoader
  .load_weights_and_postprocess``): ``model.load_weights`` ends with ``post_load_weights``
  (``srt/models/deepseek_common/deepseek_weight_loader.py``), which derives w_kc / w_vc, and only then
  does ``postprocess_weights`` run the quant methods - before the kernels ("before-kernel-load");
- SGLang 0.5.23, remote-KV loader (``RemoteModelLoader._load_model_from_remote_kv``): every quant method's
  ``process_weights_after_loading`` first, then the saved state (bytes as a previous processing left
  them) is copied into the parameters, then ``post_load_weights`` - after the kernels, whatever the
  standard loader's order.

The model reads the bytes of that moment (`QuantizedLinear.read_direct`'s ``before_kernel_load``); the
reader's name says when, so a violation on re-laid-out bytes says who re-laid them out (the weight's
layout history) and that the derivation came after it.
"""

from __future__ import annotations

# The reader's name when W_UK / W_UV are derived after the kernels in the standard order: the name
# every verdict before load orders existed used.
ABSORBED_READER = "absorbed decode (W_UK/W_UV)"


def absorbed_derived_before_kernel_load(behaviour) -> bool:
    """Whether W_UK / W_UV are derived from the bytes as loaded, before the kernels processed them."""
    return behaviour.load_order == "standard" and behaviour.absorbed_weights_derived == "before-kernel-load"


def absorbed_reader(behaviour) -> str:
    """The name of the W_UK / W_UV derivation as a direct reader of kv_b_proj, saying when it ran."""
    if behaviour.load_order == "remote-kv":
        return (
            "absorbed decode (W_UK/W_UV, derived by post_load_weights after the remote-KV loader ran the "
            "kernels' process_weights_after_loading and copied the saved, already processed state in)"
        )
    if absorbed_derived_before_kernel_load(behaviour):
        return "absorbed decode (W_UK/W_UV, derived at load before the kernels processed the weights)"
    return ABSORBED_READER


def absorbed_load_events(behaviour) -> list[str]:
    """kv_b_proj's load-history lines about W_UK / W_UV that differ from the default (none for it)."""
    events = []
    if behaviour.load_order == "remote-kv":
        events.append(
            "W_UK/W_UV derived by post_load_weights from the copied-in bytes, after the kernel's "
            "process_weights_after_loading (remote-KV load order)"
        )
    elif absorbed_derived_before_kernel_load(behaviour):
        events.append("W_UK/W_UV derived from the bytes as loaded, before the kernel's process_weights_after_loading")
    if behaviour.absorbed_weights_via == "kernel-identity":
        events.append(
            "W_UK/W_UV computed by kv_b_proj's own kernel on an identity matrix (get_and_maybe_dequant_weights of "
            "a use_deep_gemm layer): the weight as the kernel holds it after load, in its bf16 output"
        )
    dtype = behaviour.absorbed_weight_dtype
    bmm = {
        "fp8-group-quant": "multiplied by an FP8 BMM that quantizes its input per 1x128 group",
        "fp8-group-quant-uk": (
            "W_UK multiplied by an FP8 BMM that quantizes its input per 1x128 group, W_UV as bf16 (codes times "
            "the scale)"
        ),
    }.get(behaviour.absorbed_bmm, "multiplied as bf16 (codes times the scale)")
    if dtype == "bf16" and behaviour.absorbed_weights_via != "kernel-identity":
        events.append("W_UK/W_UV dequantized to bf16 (one rounding of the fp32 product)")
    elif dtype == "fp8-per-tensor":
        events.append(f"W_UK/W_UV re-quantized to FP8 with one per-tensor scale, {bmm}")
    elif dtype == "fp8-per-tensor-from-bf16":
        events.append(
            f"W_UK and W_UV dequantized to bf16, then each re-quantized to FP8 with its own per-tensor scale, {bmm}"
        )
    return events


REMOTE_KV_EVENT = (
    "remote-KV load: process_weights_after_loading ran first, then the saved (already processed) weight "
    "was copied over it"
)
