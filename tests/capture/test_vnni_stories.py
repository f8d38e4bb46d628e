"""VNNI packing in captures without the engine: a vLLM-shaped module tree (fake_engines) whose o_proj holds
its weight VNNI-packed - read packed (a layout, no story) or read as a plain matrix (the story) - and whose
kv_b_proj bytes were packed before W_UK/W_UV were derived from them. The real engine does the same in
tests/engine; this runs everywhere."""

from __future__ import annotations

import pytest
import torch
from fake_engines import dequantize, fake_vllm_worker

import mla_debug as md
from mla_debug.capture.engines import vllm_finish_capture, vllm_start_capture
from mla_debug.explain.diff import ByteRelation, Difference
from mla_debug.explain.explain import Outcome
from mla_debug.explain.stories import StoryKind
from mla_debug.layouts import vnni_pack, vnni_unpack
from mla_debug.model import Checkpoint, MLAConfig

LAYER, TOKENS, TP = 1, 6, 2


class CPUFp8BlockScaledMMKernel:
    """Named as vLLM CPU's W8A16 kernel, so the capture records it as the o_proj's kernel (which packs)."""


@pytest.fixture(scope="module")
def ckpt() -> Checkpoint:
    return Checkpoint.synthetic(MLAConfig.preset("tiny"), seed=3, layer=LAYER)


def captured(ckpt, tmp_path, *, o_proj_reader: str | None = None, kv_b_packed: bool = False):
    """A TP2 capture whose o_proj weight is packed and read `o_proj_reader` ("packed" or "plain"), and/or
    whose W_UK/W_UV were derived from kv_b_proj's packed bytes read as a plain matrix."""
    hidden = torch.randn(TOKENS, ckpt.cfg.hidden_size, generator=torch.Generator().manual_seed(1))
    for rank in range(TP):
        worker, model = fake_vllm_worker(ckpt, rank, TP)
        attention = model.model.layers[LAYER].self_attn
        if o_proj_reader is not None:
            o_proj = attention.o_proj
            if isinstance(getattr(type(o_proj), "kernel", None), CPUFp8BlockScaledMMKernel):
                o_proj.kernel = type(o_proj).kernel  # on the instance, where the capture looks
            o_proj.weight.data = vnni_pack(o_proj.weight.data)
            if o_proj_reader == "packed":
                o_proj.forward = lambda x, m=o_proj: (
                    torch.nn.functional.linear(x.float(), dequantize(vnni_unpack(m.weight), m.weight_scale_inv)),
                    None,
                )
        if kv_b_packed:
            kv_b, mla = attention.kv_b_proj, attention.mla_attn.mla_attn
            kv_b.weight.data = vnni_pack(kv_b.weight.data)
            cfg, heads = ckpt.cfg, ckpt.cfg.num_heads // TP
            per_head = dequantize(kv_b.weight, kv_b.weight_scale_inv).view(heads, -1, cfg.kv_lora_rank)
            mla.W_UK_T.data = per_head[:, : cfg.qk_nope_head_dim].contiguous()
            mla.W_UV.data = per_head[:, cfg.qk_nope_head_dim :].transpose(1, 2).contiguous()
        # The fake's o_proj does not all-reduce: its output is each rank's partial sum.
        vllm_start_capture(worker, str(tmp_path / "cap"), LAYER, mode="prefill", row_output_reduced=False)
        model(hidden, torch.arange(TOKENS))
        vllm_finish_capture(worker)
    return md.load_capture(tmp_path / "cap")


# The fake engine has no RoPE, so the baseline is its own clean capture, not mla_debug's reference run.
def test_a_packed_weight_read_packed_is_a_layout_and_no_story(ckpt, tmp_path):
    clean = captured(ckpt, tmp_path / "clean")
    cap = captured(ckpt, tmp_path / "b", o_proj_reader="packed")
    diff = md.diff_captures(clean, cap, checkpoint=ckpt)
    assert diff.diverged_steps == []
    weight = diff.weight("o_proj.weight")
    assert weight.difference is Difference.LAYOUT and {r.relation for r in weight.side("b")} == {ByteRelation.VNNI_PACKED}
    assert md.explain_capture(cap, ckpt, diff=diff).stories == []


def test_a_packed_weight_read_plain_is_found_and_named_on_every_rank(ckpt, tmp_path):
    clean = captured(ckpt, tmp_path / "clean")
    cap = captured(ckpt, tmp_path / "b", o_proj_reader="plain")
    diff = md.diff_captures(clean, cap, checkpoint=ckpt)
    assert diff.first_divergent.step == "o_proj"
    found = md.explain_capture(cap, ckpt, diff=diff).of("o_proj")
    assert found.outcome is Outcome.EXPLAINED and found.story == (StoryKind.WEIGHT_VNNI_READ_PLAIN,)
    assert "VNNI-packed" in " ".join(md.viz.explanation_lines(md.explain_capture(cap, ckpt, diff=diff)))


def test_derived_weights_from_packed_kv_b_bytes_are_named(ckpt, tmp_path):
    cap = captured(ckpt, tmp_path, kv_b_packed=True)
    explanation = md.explain_capture(cap, ckpt, steps=[])
    for step in ("absorb_uk", "absorb_uv"):
        found = explanation.of(step)
        assert found.outcome is Outcome.EXPLAINED
        assert found.story == (StoryKind.DERIVED_FROM_RELAID, StoryKind.WEIGHT_VNNI_READ_PLAIN)
        assert len(found.best.rank_errors) == TP


def test_without_a_checkpoint_per_rank_packing_is_no_difference(ckpt, tmp_path, monkeypatch):
    # The capture names the packing kernel, so neither side's bytes are taken for the checkpoint.
    monkeypatch.setattr("fake_engines.FakeLinear.kernel", CPUFp8BlockScaledMMKernel(), raising=False)
    a = captured(ckpt, tmp_path / "a", o_proj_reader="packed")
    one = []
    hidden = torch.randn(TOKENS, ckpt.cfg.hidden_size, generator=torch.Generator().manual_seed(1))
    worker, model = fake_vllm_worker(ckpt, 0, 1)
    o_proj = model.model.layers[LAYER].self_attn.o_proj
    o_proj.weight.data = vnni_pack(o_proj.weight.data)
    o_proj.forward = lambda x, m=o_proj: (
        torch.nn.functional.linear(x.float(), dequantize(vnni_unpack(m.weight), m.weight_scale_inv)), None
    )
    o_proj.kernel = CPUFp8BlockScaledMMKernel()
    vllm_start_capture(worker, str(tmp_path / "tp1"), LAYER, mode="prefill")
    model(hidden, torch.arange(TOKENS))
    one.append(vllm_finish_capture(worker))
    diff = md.diff_captures(md.load_capture(tmp_path / "tp1"), a)
    weight = diff.weight("o_proj.weight")
    assert weight.difference is Difference.NONE, weight
    assert {r.relation for r in weight.ranks} == {ByteRelation.VNNI_PACKED}
