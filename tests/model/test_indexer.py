"""DeepSeek-V3.2's indexer: its tensors are recognised and skipped (named, never read), and a run with
more tokens than index_topk is made densely with a warning."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from ckpt_helpers import prefixed

import mla_debug as md
from mla_debug.model import Checkpoint, MLAConfig
from mla_debug.model.indexer import SparseAttentionWarning, exact_for, has_v32_indexer, indexer_keys

TINY = MLAConfig.preset("tiny")
TINY_V32 = TINY.with_(name="tiny-v3.2", index_n_heads=4, index_head_dim=128, index_topk=8)
INDEXER_STATE = {
    "indexer.wq_b.weight": torch.zeros(512, 256, dtype=torch.float8_e4m3fn),
    "indexer.wq_b.weight_scale_inv": torch.ones(4, 2),
    "indexer.wk.weight": torch.zeros(128, 512, dtype=torch.bfloat16),
    "indexer.k_norm.weight": torch.ones(128),
    "indexer.k_norm.bias": torch.zeros(128),
    "indexer.weights_proj.weight": torch.zeros(4, 512, dtype=torch.bfloat16),
}


def test_which_configs_have_the_v32_indexer():
    assert has_v32_indexer(TINY_V32) and has_v32_indexer(MLAConfig.preset("deepseek-v3.2"))
    assert not has_v32_indexer(TINY) and indexer_keys(TINY) == ()
    v4 = MLAConfig.preset("tiny-v4")  # V4's indexer query is modelled; it is not V3.2's
    assert v4.has_indexer and not has_v32_indexer(v4) and exact_for(v4, 10_000)
    assert len(indexer_keys(TINY_V32)) == 8 and all(key.startswith("indexer.") for key in indexer_keys(TINY_V32))
    assert exact_for(TINY_V32, 8) and not exact_for(TINY_V32, 9)


def test_indexer_tensors_are_skipped_and_named_from_a_state_dict():
    mla = Checkpoint.synthetic(TINY_V32, seed=0)
    assert mla.unmodelled == ()  # synthetic weights hold no indexer
    assert Checkpoint.from_state_dict(TINY_V32, prefixed(mla, layer=3)).unmodelled == ()  # the indexer is optional
    state = {**mla.tensors, **INDEXER_STATE}
    ckpt = Checkpoint.from_state_dict(TINY_V32, {f"model.layers.3.self_attn.{k}": v for k, v in state.items()})
    assert ckpt.unmodelled == tuple(sorted(INDEXER_STATE)) and set(ckpt.tensors) == set(mla.tensors)
    assert ckpt.layer == 3 and "6 not modelled" in repr(ckpt)
    with pytest.raises(ValueError, match=r"indexer\.wk\.weight'.*not part of a v3 attention layer.*deepseek_v32"):
        Checkpoint.from_state_dict(TINY, state)
    assert Checkpoint.from_state_dict(TINY, state, ignore_extra=True).ignored == tuple(sorted(INDEXER_STATE))
    with pytest.raises(TypeError, match="unmodelled must be a sequence of tensor names"):
        Checkpoint(TINY_V32, 0, mla.tensors, True, unmodelled="indexer.wk.weight")
    moved = ckpt.to("cpu")
    assert moved.unmodelled == ckpt.unmodelled


def test_a_saved_v32_layer_reads_back_as_v32(tmp_path):
    ckpt = Checkpoint.synthetic(TINY_V32, seed=1, layer=2)
    folder = ckpt.save(tmp_path / "v32")
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["index_topk"]) == ("deepseek_v32", 8)
    back = Checkpoint.load(folder, layer=2)
    assert back.cfg == TINY_V32.with_(name="v32") and back.unmodelled == ()


def test_a_run_above_index_topk_warns_and_at_it_does_not():
    ckpt = Checkpoint.synthetic(TINY_V32, seed=0)
    hidden = torch.randn(9, 512, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparseAttentionWarning)
        md.run_layer(TINY_V32, ckpt, hidden[:8], torch.arange(8))
    with pytest.warns(SparseAttentionWarning, match=r"tiny-v3.2: 9 tokens exceed index_topk=8; .* exact only up to 8"):
        run = md.run_layer(TINY_V32, ckpt, hidden, torch.arange(9))
    assert run.output.shape == (9, 512)  # made, densely
