"""The shipped sample checkpoint (data/checkpoints/tiny-v3.2-fp8) cannot rot: its script writes it again
byte for byte, it loads as DeepSeek-V3.2 with the indexer recognised, and transformers' own V3.2 attention
reading the same files computes what run_layer computes."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from ckpt_helpers import deepseek_dequantize
from safetensors.torch import load_file

import mla_debug as md
from mla_debug.model import Checkpoint, expected_shapes

FOLDER = md.scenarios.data_folder() / "checkpoints"
SAMPLE = FOLDER / "tiny-v3.2-fp8"


def _script():
    spec = importlib.util.spec_from_file_location("make_tiny_v32_fp8", FOLDER / "make_tiny_v32_fp8.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_writes_the_shipped_bytes(tmp_path):
    pytest.importorskip("transformers")  # the tensor names come from transformers' module
    made = _script().make(tmp_path / "again")
    shipped = sorted(p.name for p in SAMPLE.iterdir())
    assert sorted(p.name for p in made.iterdir()) == shipped
    differ = [name for name in shipped if (made / name).read_bytes() != (SAMPLE / name).read_bytes()]
    assert differ == [], (
        f"regenerated {differ} differ from data/checkpoints/tiny-v3.2-fp8: if torch's seeded generator or "
        "safetensors' writer changed, regenerate the folder with data/checkpoints/make_tiny_v32_fp8.py"
    )
    with pytest.raises(FileExistsError, match="exists; remove it first"):
        _script().make(made)


def test_the_sample_is_a_small_v32_in_deepseeks_format():
    assert sum(p.stat().st_size for p in SAMPLE.iterdir()) < 5_000_000
    config = json.loads((SAMPLE / "config.json").read_text())
    assert config["quantization_config"] == {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "scale_fmt": "ue8m0",
        "weight_block_size": [128, 128],
    }
    for layer in (0, 1):
        ckpt = Checkpoint.load(SAMPLE, layer=layer)
        cfg = ckpt.cfg
        assert cfg.name == "tiny-v3.2-fp8" and cfg.has_indexer and cfg.index_topk == 32 and ckpt.quantized
        assert set(ckpt.tensors) == set(expected_shapes(cfg, scales=True)) and len(ckpt.unmodelled) == 7
        for module in ckpt.linear_modules():
            scale = ckpt.tensors[f"{module}.weight_scale_inv"]
            assert torch.equal(torch.log2(scale), torch.log2(scale).round()), module  # ue8m0: powers of two
    for tp in (1, 2, 4, 8):
        cfg.check_tp(tp)


def test_transformers_v32_attention_reading_the_sample_computes_what_run_layer_does():
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf

    config = transformers.AutoConfig.from_pretrained(SAMPLE)
    config._attn_implementation = "eager"
    attention = hf.DeepseekV32Attention(config, layer_idx=1).eval()
    prefix = "model.layers.1.self_attn."
    stored = load_file(str(SAMPLE / "model-00002-of-00003.safetensors"))
    state = {}
    for key, value in stored.items():
        if key.endswith("_scale_inv"):
            continue
        if value.dtype == torch.float8_e4m3fn:
            value = deepseek_dequantize(value, stored[key.removesuffix(".weight") + ".weight_scale_inv"])
        state[key.removeprefix(prefix)] = value.float()
    attention.load_state_dict(state)
    hidden = torch.randn(16, config.hidden_size, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(5000, 5016)
    cos, sin = hf.DeepseekV32RotaryEmbedding(config)(hidden[None], positions[None])
    mask = torch.full((16, 16), float("-inf")).triu(1).view(1, 1, 16, 16)
    with torch.no_grad():
        expected = attention(hidden[None], position_embeddings=(cos, sin), attention_mask=mask)[0][0]
    ckpt = Checkpoint.load(SAMPLE, layer=1)
    dense = md.verdict.dense_twin(ckpt)
    for mode in ("prefill", "decode"):
        run = md.run_layer(dense.cfg, dense, hidden, positions, tp_size=2, mode=mode, dtype=torch.float32)
        assert md.numerics.error_metrics(run.output, expected)["rel_l2"] < 1e-5, mode
