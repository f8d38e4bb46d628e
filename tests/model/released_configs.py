"""config.json files of released models (the attention-relevant parts and their neighbours), shared by
the config tests.

Provenance. DeepSeek-V3's file is the release as read. For the others, the searchable stored copies of the
Hugging Face Hub did not hold the files themselves; each entry names the release's URL and the public
records its attention-relevant values were taken from (model cards, and tools that dumped or bound the
released config), and keeps only those values - everything a test compares.
"""

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

# https://huggingface.co/deepseek-ai/DeepSeek-R1/blob/main/config.json - the DeepSeek-V3 architecture and
# config.json, attention fields unchanged.
DEEPSEEK_R1_JSON = dict(DEEPSEEK_V3_JSON)

# https://huggingface.co/deepseek-ai/DeepSeek-V3.1/blob/main/config.json - V3's attention; the model card:
# "DeepSeek-V3.1 is trained using the UE8M0 FP8 scale data format on both model weights and activations",
# declared as quantization_config.scale_fmt "ue8m0" (the key vLLM 0.33's transformers_utils/config.py
# get_config and SGLang 0.5.23's Fp8Config.from_config read).
DEEPSEEK_V31_JSON = {
    **DEEPSEEK_V3_JSON,
    "quantization_config": {**DEEPSEEK_V3_JSON["quantization_config"], "scale_fmt": "ue8m0"},
}

# Kimi-K2 ships the DeepSeek-V3 architecture (model_type kimi_k2) with 64 heads and its own RoPE.
# https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json. Records: the model card (64
# attention heads, hidden 7168, MLA, 128K context), the tiny transformers config made from it
# (https://huggingface.co/hyper-accel/tiny-random-kimi-k2/blob/main/config.json: max_position_embeddings 131072,
# rms_norm_eps 1e-06, yarn beta_fast 1.0, beta_slow 1.0, factor 32.0), public test fixtures binding the
# released Kimi-K2 values (rms_norm_eps 1e-06; rope_theta 50000.0 with factor 32, mscale 1.0, mscale_all_dim
# 1.0, original_max_position_embeddings 4096) and the block-FP8 weights the card names.
KIMI_K2_INSTRUCT_JSON = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-06,
    "rope_theta": 50000.0,
    "rope_scaling": {
        "beta_fast": 1.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "num_hidden_layers": 61,
    "vocab_size": 163840,
}

# https://huggingface.co/moonshotai/Kimi-K2-Instruct-0905/blob/main/config.json: the context grows to 256K
# (model card), the yarn factor to 64. Record of the file's rope and heads:
# https://github.com/ParagEkbote/hf-model-inspector/blob/main/model_inspection_report.md (Rope Theta 50000.0,
# Rope Scaling {'beta_fast': 1.0, 'beta_slow': 1.0, 'factor': 64.0, 'mscale': 1.0, 'mscale_all_dim': 1.0,
# 'original_max_position_embeddings': 4096, 'type': 'yarn'}, Attention Heads 64).
KIMI_K2_INSTRUCT_0905_JSON = {
    **KIMI_K2_INSTRUCT_JSON,
    "max_position_embeddings": 262144,
    "rope_scaling": {**KIMI_K2_INSTRUCT_JSON["rope_scaling"], "factor": 64.0},
}

# https://huggingface.co/moonshotai/Kimi-K2-Thinking/blob/main/config.json: 0905's attention with the release's
# native INT4 (compressed-tensors, group 32) routed experts; attention, shared experts and the dense MLP stay
# bf16. The quantization_config below has the structure of that release (one Linear group, an ignore list
# that names the attention by regular expression); its exact ignore entries could not be read from a
# stored copy, so the tests exercising it check the matching rule itself against vLLM's matcher too.
KIMI_K2_THINKING_JSON = {
    **KIMI_K2_INSTRUCT_0905_JSON,
    "quantization_config": {
        "config_groups": {
            "group_0": {
                "input_activations": None,
                "output_activations": None,
                "targets": ["Linear"],
                "weights": {
                    "dynamic": False,
                    "group_size": 32,
                    "num_bits": 4,
                    "strategy": "group",
                    "symmetric": True,
                    "type": "int",
                },
            }
        },
        "format": "pack-quantized",
        "ignore": [
            "lm_head",
            "re:.*self_attn.*",
            "re:.*shared_experts.*",
            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        ],
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    },
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
