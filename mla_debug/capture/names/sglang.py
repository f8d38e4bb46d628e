"""Name map of SGLang 0.5.23's DeepSeek-V2/V3 MLA attention (facts read from the released wheel).

sglang 0.5.23, srt/models/deepseek_v2.py, class DeepseekV2AttentionMLA (the decoder layer's
``self_attn``, called as ``self_attn(positions=..., hidden_states=..., forward_batch=..., ...)``):
- ``fused_qkv_a_proj_with_mqa`` (ReplicatedLinear: q_a rows then kv_a rows), ``q_a_layernorm`` and
  ``kv_a_layernorm`` (RMSNorm), ``q_b_proj`` and ``kv_b_proj`` (ColumnParallelLinear), ``o_proj``
  (RowParallelLinear). DeepseekV2DecoderLayer builds the attention with reduce_results=False: o_proj's
  output (and the attention module's) is a partial sum, all-reduced later by the layer communicator.
- ``w_kc`` and ``w_vc``, derived from kv_b_proj by srt/models/deepseek_common/deepseek_weight_loader.py
  (post_load_weights). Without the DeepGEMM BMM: w_kc (Nh/t, P, Lkv) stored column-major in its last
  two dims, w_vc (Nh/t, Lkv, V) a transposed view, and ``w_scale`` one scale both share (1.0 when
  none). With it: w_kc (Nh/t, Lkv, P) and w_vc (Nh/t, V, Lkv) contiguous, with per-block scales
  ``w_scale_k`` (Nh/t, Lkv/128, P/128) and ``w_scale_v`` (Nh/t, V/128, Lkv/128). Which one a capture
  holds shows in its shapes and strides, so the map names no axes.
Hooks fire only without CUDA graphs and torch.compile (disable_cuda_graph=True).
"""

from __future__ import annotations

from .name_map import Argument, DerivedName, ModuleName, NameMap

SGLANG_0_5_23 = NameMap(
    key="sglang-0.5.23",
    engine="sglang",
    version="0.5.23",
    source="sglang 0.5.23, srt/models/deepseek_v2.py, DeepseekV2AttentionMLA",
    attention_classes=("DeepseekV2AttentionMLA",),
    attention_attr="self_attn",
    modules=(
        ModuleName("fused_qkv_a_proj_with_mqa", "fused_qkv_a_proj"),
        ModuleName("q_a_layernorm", "q_a_layernorm"),
        ModuleName("kv_a_layernorm", "kv_a_layernorm"),
        ModuleName("q_b_proj", "q_b_proj"),
        ModuleName("kv_b_proj", "kv_b_proj"),
        ModuleName("o_proj", "o_proj"),
    ),
    derived=(
        DerivedName("w_kc", "W_UK", head_dim=0),
        DerivedName("w_vc", "W_UV", head_dim=0),
        DerivedName("w_scale", "W_scale"),
        DerivedName("w_scale_k", "W_UK.scale", head_dim=0),
        DerivedName("w_scale_v", "W_UV.scale", head_dim=0),
    ),
    hidden_arg=Argument("hidden_states", 1),
    positions_arg=Argument("positions", 0),
    row_output_reduced=False,
)
