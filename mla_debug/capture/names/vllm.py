"""Name map of vLLM 0.33.0's DeepSeek-V2/V3 MLA attention (facts read from the released wheel).

vllm 0.33.0, model_executor/models/deepseek_v2.py, class DeepseekV2MLAAttention (the decoder layer's
``self_attn``, called as ``self_attn(positions=..., hidden_states=..., ...)``; its forward is
``forward(positions, hidden_states, llama_4_scaling)``):
- ``fused_qkv_a_proj`` (DeepSeekV2FusedQkvAProjLinear, a MergedColumnParallelLinear with disable_tp: q_a
  rows then kv_a rows, replicated), ``q_a_layernorm`` and ``kv_a_layernorm`` (RMSNorm), ``q_b_proj`` and
  ``kv_b_proj`` (ColumnParallelLinear), ``o_proj`` (RowParallelLinear, reduce_results=True unless
  sequence-parallel MoE is on: its output is all-reduced inside the module).
- ``mla_attn`` (MultiHeadLatentAttentionWrapper, model_executor/layers/mla.py) whose ``mla_attn``
  (MLAAttention, model_executor/layers/attention/mla_attention.py) is called with the roped q and
  returns the per-head attention output (T, Nh/t * V). In process_weights_after_loading MLAAttention
  keeps ``W_UK_T`` (Nh/t, P, Lkv) and ``W_UV`` (Nh/t, Lkv, V) derived from kv_b_proj; with aiter's FP8
  BMM on ROCm instead ``W_K`` (Nh/t, Lkv, P) and ``W_V`` (Nh/t, V, Lkv) in FP8 with per-tensor scales
  ``W_K_scale`` and ``W_V_scale``.
Linear weights keep their names (``weight``, block scale ``weight_scale_inv``, model_executor/layers/
quantization/fp8.py); a preshuffling kernel marks its layer ``aiter_bpreshuffled``
(model_executor/kernels/linear/scaled_mm/aiter.py). Hooks fire only in eager mode (enforce_eager=True):
compiled graphs and CUDA graphs bypass module calls.
"""

from __future__ import annotations

from .name_map import Argument, DerivedName, ModuleName, NameMap

# DeepseekV2MLAAttention's modules, the same on every platform vLLM builds for.
DEEPSEEK_V2_MLA_MODULES = (
    ModuleName("fused_qkv_a_proj", "fused_qkv_a_proj"),
    ModuleName("q_a_layernorm", "q_a_layernorm"),
    ModuleName("kv_a_layernorm", "kv_a_layernorm"),
    ModuleName("q_b_proj", "q_b_proj"),
    ModuleName("kv_b_proj", "kv_b_proj"),
    ModuleName("mla_attn.mla_attn", "attention"),
    ModuleName("o_proj", "o_proj"),
)
VLLM_0_33 = NameMap(
    key="vllm-0.33",
    engine="vllm",
    version="0.33.0",
    source="vllm 0.33.0, model_executor/models/deepseek_v2.py, DeepseekV2MLAAttention",
    attention_classes=("DeepseekV2MLAAttention",),
    attention_attr="self_attn",
    modules=DEEPSEEK_V2_MLA_MODULES,
    derived=(
        DerivedName("mla_attn.mla_attn.W_UK_T", "W_UK", axes="heads,nope,latent", head_dim=0),
        DerivedName("mla_attn.mla_attn.W_UV", "W_UV", axes="heads,latent,v", head_dim=0),
        DerivedName("mla_attn.mla_attn.W_K", "W_UK", axes="heads,latent,nope", head_dim=0),
        DerivedName("mla_attn.mla_attn.W_V", "W_UV", axes="heads,v,latent", head_dim=0),
        DerivedName("mla_attn.mla_attn.W_K_scale", "W_UK.scale"),
        DerivedName("mla_attn.mla_attn.W_V_scale", "W_UV.scale"),
    ),
    hidden_arg=Argument("hidden_states", 1),
    positions_arg=Argument("positions", 0),
    row_output_reduced=True,
    notes=("with sequence-parallel MoE, o_proj is built with reduce_results=False: pass row_output_reduced=False",),
)
