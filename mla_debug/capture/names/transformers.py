"""Name maps of transformers' DeepSeek-V3 and V3.2 attention (facts read from transformers 5.24).

transformers 5.24, models/deepseek_v3/modeling_deepseek_v3.py, class DeepseekV3Attention: unfused
linears ``q_a_proj``, ``kv_a_proj_with_mqa``, ``q_b_proj``, ``kv_b_proj``, ``o_proj`` (nn.Linear) and the
RMSNorms ``q_a_layernorm``, ``kv_a_layernorm``; the decoder layer calls ``self.self_attn(hidden_states=...,
position_ids=..., position_embeddings=...)`` by keyword. models/deepseek_v32/modeling_deepseek_v32.py,
class DeepseekV32Attention: the same attributes, plus an ``indexer`` (not part of the attention proper).
No derived W_UK/W_UV: the naive path multiplies by kv_b_proj on every call.

Under tensor parallelism (distributed/tensor_parallel.py) RowwiseParallel all-reduces o_proj's output
inside the module's replaced forward, so a forward hook sees the reduced output; weights are DTensors
whose local shard is what the rank stores. DeepSeek-V3's own base_model_tp_plan shards only the MLP
(its attention stays replicated); V3.2's shards q_b_proj and kv_b_proj colwise and o_proj rowwise.
"""

from __future__ import annotations

from dataclasses import replace

from .name_map import Argument, ModuleName, NameMap

_MODULES = tuple(
    ModuleName(name, name)
    for name in ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj")
)

TRANSFORMERS_DEEPSEEK_V3 = NameMap(
    key="transformers-deepseek_v3",
    engine="transformers",
    version="5.24",
    source="transformers 5.24, models/deepseek_v3/modeling_deepseek_v3.py, DeepseekV3Attention",
    attention_classes=("DeepseekV3Attention",),
    attention_attr="self_attn",
    modules=_MODULES,
    hidden_arg=Argument("hidden_states", 0),
    positions_arg=Argument("position_ids"),
    row_output_reduced=True,
)

# DeepSeek-V3.2's attention: V3's modules and call, plus the indexer.
TRANSFORMERS_DEEPSEEK_V32 = replace(
    TRANSFORMERS_DEEPSEEK_V3,
    key="transformers-deepseek_v32",
    source="transformers 5.24, models/deepseek_v32/modeling_deepseek_v32.py, DeepseekV32Attention",
    attention_classes=("DeepseekV32Attention",),
    notes=("the indexer (sparse top-k selection) is not captured",),
)
