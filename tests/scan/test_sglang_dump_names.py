"""SGLang's own dumper (released wheel, in this process) on a module tree named as SGLang 0.5.23's
DeepSeek attention (tests/capture/fake_engines.py: fused_qkv_a_proj_with_mqa, FP8 linears with block
scales, called with positions=/hidden_states= keywords): the dump reads into the capture md.capture
records of the same forward with SGLang's name map, byte for byte."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sglang_package
import torch

import mla_debug as md
from mla_debug.model import Checkpoint, MLAConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "capture"))
from fake_engines import DeepseekV2AttentionMLA, FakeModel  # noqa: E402

LAYER, TOKENS = 1, 6


@pytest.fixture
def dumper(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(sglang_package.debug_utils_root()))
    from sglang.srt.debug_utils.dumper import dumper

    dumper.configure(
        enable=True, dir=str(tmp_path / "dumps"), exp_name="dump", non_intrusive_mode="all",
        enable_model_value=True, enable_output_console=False,
        filter=f"name == 'positions' or search(r'layers\\.{LAYER}\\.', name)",
    )
    yield dumper
    dumper.reset()
    dumper.configure(enable=False, exp_name=None, filter=None)


def test_an_sglang_named_tree_dumped_by_sglangs_dumper_reads_as_md_capture_records_it(dumper, tmp_path):
    ckpt = Checkpoint.synthetic(MLAConfig.preset("tiny"), seed=3)
    model = FakeModel(DeepseekV2AttentionMLA, ckpt, rank=0, tp_size=1)
    hidden = torch.randn(TOKENS, ckpt.cfg.hidden_size, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    dumper.register_non_intrusive_dumper(model)
    dumper.dump_model(model)
    with md.capture(model, tmp_path / "capture", layer=LAYER, names="sglang-0.5.23", mode="prefill"), torch.no_grad():
        model(hidden, torch.arange(TOKENS), layer=LAYER, forward_batch=None, zero_allocator=None)
    dumper.step()
    names = {p.name.split("name=")[1].split("___")[0] for p in (tmp_path / "dumps" / "dump").glob("*.pt")}
    assert f"non_intrusive__model.layers.{LAYER}.self_attn.fused_qkv_a_proj_with_mqa.output" in names
    assert "positions" in names and f"param__model.layers.{LAYER}.self_attn.kv_b_proj.weight_scale_inv" in names
    from_dump = md.capture.load_sglang_dump(tmp_path / "dumps", config=ckpt.cfg)
    captured = md.load_capture(tmp_path / "capture")
    assert from_dump.manifest.engine.name == "sglang" and from_dump.manifest.positions == tuple(range(TOKENS))
    linear_weights = {n for n in captured.names() if n.endswith((".weight", ".weight_scale_inv"))}
    compared = (set(captured.names(md.capture.TensorRole.OUTPUT)) | linear_weights) & set(from_dump.names())
    # (the absorbed path never calls kv_b_proj: SGLang reads w_kc / w_vc, which are not parameters)
    assert {"fused_qkv_a.output", "q_b_proj.output", "o_proj.output", "layer.output", "kv_b_proj.weight_scale_inv"} <= compared
    for name in compared:
        ours, theirs = from_dump.rank(0)[name], captured.rank(0)[name]
        assert ours.tensor.dtype == theirs.tensor.dtype and ours.shard is theirs.shard, name
        assert torch.equal(ours.tensor.contiguous().view(torch.uint8), theirs.tensor.contiguous().view(torch.uint8)), name
