"""Oracle: transformers' DeepseekV3Attention with ``rope_interleave`` false (``apply_rotary_pos_emb``,
rotate_half pairs) and true (``apply_rotary_pos_emb_interleave``) against run_layer in fp32 with the
module's own weights, at TP 1/2/4, prefill and decode, at positions past the yarn pre-training length.

The two differ only in fp32 summation order, so rel_l2 stays far below 1e-5; the wrong pairing is off by
order 1e-1 (checked too, so the test can tell the pairings apart). vLLM 0.33 pairs interleaved whatever
the config says (its profile's behaviour): that run is the wrong pairing for a rope_interleave=false layer.
"""

from __future__ import annotations

import pytest
import torch
from hf_deepseek import attention_widths, eager, transformers_output

import mla_debug as md

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf  # noqa: E402

POSITIONS = torch.arange(5000, 5012)  # past original_max_position_embeddings: yarn's interpolation matters


def reference_module(interleave: bool):
    config = eager(transformers.DeepseekV3Config(rope_interleave=interleave, **attention_widths()))
    torch.manual_seed(3)
    attention = hf.DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        attention.q_a_layernorm.weight.uniform_(0.5, 1.5)
        attention.kv_a_layernorm.weight.uniform_(0.5, 1.5)
    return config, attention, hf.DeepseekV3RotaryEmbedding(config)


@pytest.fixture(scope="module")
def cases():
    """Per pairing (halves: rope_interleave false; interleaved: true): config, checkpoint, input and
    transformers' output."""
    out = {}
    for name, interleave in (("halves", False), ("interleaved", True)):
        config, attention, rotary = reference_module(interleave)
        cfg = md.MLAConfig.from_hf(config.to_dict(), name="hf-tiny")
        assert cfg.rope_interleave is interleave
        ckpt = md.Checkpoint.from_state_dict(cfg, attention.state_dict(), quantize=False)
        hidden = torch.randn(len(POSITIONS), 512, generator=torch.Generator().manual_seed(4))
        out[name] = (cfg, ckpt, hidden, transformers_output(attention, rotary, hidden, POSITIONS))
    return out


@pytest.mark.parametrize("pairing", ["halves", "interleaved"])
@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("tp_size", [1, 2, 4])
def test_the_layer_matches_transformers_for_either_pairing(cases, pairing, tp_size, mode):
    cfg, ckpt, hidden, expected = cases[pairing]
    run = md.run_layer(cfg, ckpt, hidden, POSITIONS, tp_size=tp_size, mode=mode, dtype=torch.float32)
    assert md.numerics.error_metrics(run.output, expected)["rel_l2"] < 1e-5


@pytest.mark.parametrize("pairing", ["halves", "interleaved"])
def test_the_other_pairing_is_far_off(cases, pairing):
    cfg, ckpt, hidden, expected = cases[pairing]
    wrong = cfg.with_(rope_interleave=not cfg.rope_interleave)
    run = md.run_layer(wrong, md.Checkpoint(wrong, 0, ckpt.tensors, False), hidden, POSITIONS, dtype=torch.float32)
    assert md.numerics.error_metrics(run.output, expected)["rel_l2"] > 1e-2


def test_vllm_pairs_a_halves_checkpoint_interleaved_and_sglang_does_not(cases):
    cfg, ckpt, hidden, expected = cases["halves"]
    vllm = md.run_layer(cfg, ckpt, hidden, POSITIONS, scenario="vllm-0.33", dtype=torch.float32)
    sglang = md.run_layer(cfg, ckpt, hidden, POSITIONS, scenario="sglang-0.5.23", dtype=torch.float32)
    assert "ignoring rope_interleave=false" in vllm.records["rope"].kernel
    assert md.numerics.error_metrics(vllm.output, expected)["rel_l2"] > 1e-2
    assert md.numerics.error_metrics(sglang.output, expected)["rel_l2"] < 1e-5
