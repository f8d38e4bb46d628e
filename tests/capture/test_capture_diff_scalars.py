"""A capture diff of two captures that each hold a scalar (0-dim) derived tensor - vLLM CPU AMX_MLA's
W_UK/W_UV scale `impl._w_scale` - compares its bytes like any other tensor's (the real engine's clean and
planted TP1 captures hold one each: tests/engine)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from fake_engines import fake_vllm_worker

import mla_debug as md
from mla_debug.capture.engines import vllm_finish_capture, vllm_start_capture
from mla_debug.model import Checkpoint, MLAConfig

LAYER, TOKENS = 1, 6


def capture_with_scale(ckpt, out, scale: float):
    worker, model = fake_vllm_worker(ckpt, 0, 1)
    model.model.layers[LAYER].self_attn.mla_attn.mla_attn.impl = SimpleNamespace(_w_scale=torch.tensor(scale))
    vllm_start_capture(worker, str(out), LAYER, names="vllm-0.32-cpu")
    model(torch.randn(TOKENS, 512, generator=torch.Generator().manual_seed(1)), torch.arange(TOKENS))
    vllm_finish_capture(worker)
    return md.load_capture(out)


def test_two_captures_holding_a_scalar_weight_diff(tmp_path):
    ckpt = Checkpoint.synthetic(MLAConfig.preset("tiny"), seed=3)
    a = capture_with_scale(ckpt, tmp_path / "a", 0.5)
    assert a.rank(0)["W_scale"].tensor.dim() == 0
    same = md.diff_captures(a, capture_with_scale(ckpt, tmp_path / "b", 0.5), checkpoint=ckpt)
    other = md.diff_captures(a, capture_with_scale(ckpt, tmp_path / "c", 0.25), checkpoint=ckpt)
    assert same.weight("W_scale").difference is md.explain.diff.Difference.NONE
    assert other.weight("W_scale").difference is md.explain.diff.Difference.VALUE
