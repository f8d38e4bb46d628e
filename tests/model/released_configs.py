"""config.json files of released models (the attention-relevant parts and their neighbours), shared by
the config tests."""

from __future__ import annotations

# DeepSeek-V3's config.json as released (attention, MoE and bookkeeping fields; auto_map left out).
DEEPSEEK_V3_JSON = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "pretraining_tp": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}

# Kimi-K2 ships a DeepSeek-V3 architecture with 64 heads and its own RoPE settings.
KIMI_K2_JSON = {
    **DEEPSEEK_V3_JSON,
    "model_type": "kimi_k2",
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "rope_theta": 50000.0,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "beta_fast": 1.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "vocab_size": 163840,
}

DEEPSEEK_V4_FLASH_JSON = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "hidden_size": 4096,
    "num_attention_heads": 64,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "q_lora_rank": 1024,
    "qk_rope_head_dim": 64,
    "o_groups": 8,
    "o_lora_rank": 1024,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 512,
    "sliding_window": 128,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "max_position_embeddings": 1048576,
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}

# DeepSeek-V3.2-Exp's config.json: DeepSeek-V3.1-Terminus's (ue8m0 block scales) with the model type of
# V3.2 and the three fields of its lightning indexer (transformers' DeepseekV32Config defaults are the
# same values).
DEEPSEEK_V32_EXP_JSON = {
    **DEEPSEEK_V3_JSON,
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "index_head_dim": 128,
    "index_n_heads": 64,
    "index_topk": 2048,
    "quantization_config": {**DEEPSEEK_V3_JSON["quantization_config"], "scale_fmt": "ue8m0"},
}
