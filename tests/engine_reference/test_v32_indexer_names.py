"""The names `model.indexer` recognises as DeepSeek-V3.2's indexer are the ones its implementations load:
transformers' DeepseekV32Indexer (its state dict), vLLM 0.33.0's and SGLang 0.5.23's Indexer (the modules
they build and the checkpoint names their loaders take)."""

from __future__ import annotations

import ast

import pytest
from engine_wheels import require, source

from mla_debug.model import MLAConfig
from mla_debug.model.indexer import PREFIX, TENSORS, indexer_keys

V32 = MLAConfig.preset("deepseek-v3.2")


def _init_of(package: str, member: str, cls: str) -> str:
    require(package)
    text = source(package, member)
    (klass,) = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef) and n.name == cls]
    (init,) = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    return ast.get_source_segment(text, init)


def test_transformers_indexer_state_dict_is_what_is_recognised():
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Indexer

    config = transformers.DeepseekV32Config(index_n_heads=4, index_head_dim=128, hidden_size=256, q_lora_rank=128)
    with torch.device("meta"):
        indexer = DeepseekV32Indexer(config, layer_idx=0)
    names = {PREFIX + key for key in indexer.state_dict()}
    # transformers holds no FP8 scales; DeepSeek's release adds weight_scale_inv beside wq_b and wk.
    assert names == {key for key in indexer_keys(V32) if not key.endswith("_scale_inv")}


def test_vllm_builds_and_loads_the_same_modules():
    init = _init_of("vllm", "vllm/model_executor/models/deepseek_v2.py", "Indexer")
    for module in ("self.wq_b", "self.k_norm"):
        assert f"{module} = " in init, module
    # wk and weights_proj are fused at load ("wk_weights_proj", shards 0 and 1) from the checkpoint's names.
    assert "self.wk_weights_proj = MergedColumnParallelLinear(" in init
    loader = source("vllm", "vllm/model_executor/models/deepseek_v2.py")
    assert '("wk_weights_proj", "wk", 0)' in loader and '("wk_weights_proj", "weights_proj", 1)' in loader
    assert set(TENSORS) == {"wq_b", "wk", "k_norm", "weights_proj"}


def test_sglang_builds_the_same_modules():
    init = _init_of("sglang", "sglang/srt/layers/attention/dsa/dsa_indexer.py", "Indexer")
    for module in ("self.wq_b = ", "self.wk = ", "self.weights_proj = ", "self.k_norm = LayerNorm("):
        assert module in init, module
