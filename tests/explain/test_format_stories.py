"""Scale-representation and grouped-order stories: recognised from one op's held tensors
(`explain_operands`) and from a capture (`explain_capture` adds them to its layout stories); a correct op and a
value fault get none."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import mla_debug as md
from mla_debug.explain import run_capture
from mla_debug.explain.explain import Outcome, explain_capture
from mla_debug.explain.format_stories import FormatOperands, nan_aware_rel_err, scale_readings
from mla_debug.explain.operands import explain_operands
from mla_debug.explain.stories import StoryKind
from mla_debug.kernels.held_scales import block_gemm, consumer_read
from mla_debug.layouts.scale_format import codes_read_as_values, e8m0_codes, grouped_scale_read, pack_exponents
from mla_debug.numerics.quantize import block_quantize, group_quantize


def grouped_op(t=4, g=3, d=256, r=128, seed=0, ue8m0=False):
    gen = torch.Generator().manual_seed(seed)
    o = torch.randn(t, g, d, generator=gen) * (10 ** torch.rand(t, g, 1, generator=gen))
    flavor = "sglang-triton-colmajor"
    codes, scale, _ = group_quantize(o, 128, "e4m3fn", flavor, ue8m0=ue8m0)
    ws = [
        block_quantize(torch.randn(r, d, generator=gen) * 0.02, (128, 128), "e4m3fn", "deepgemm", ue8m0=True)
        for _ in range(g)
    ]
    return codes, scale, torch.stack([w[0] for w in ws]), torch.stack([w[1] for w in ws])


@pytest.mark.parametrize(
    ("consumer", "story"),
    [("ue8m0-masked", StoryKind.SCALE_TRUNCATED), ("ue8m0-unmasked", StoryKind.UE8M0_MANTISSA_LEAK)],
)
def test_a_ue8m0_consumer_of_fp32_scales_is_recognised(consumer, story):
    x, s, w, ws = grouped_op()
    read = consumer_read(s.reshape(-1, s.shape[-1]), s.shape[-1], consumer).view(s.shape)
    found = explain_operands("wo_a", [FormatOperands(x, s, w, ws)], [block_gemm(x, read, w, ws, torch.bfloat16)])
    assert found.outcome is Outcome.EXPLAINED and found.story == (story,)
    assert found.best.rel_err == 0.0 and found.correct.rel_err > 0.1


def test_power_of_two_scales_tell_no_story_whatever_the_consumer():
    x, s, w, ws = grouped_op(ue8m0=True)
    for consumer in ("fp32", "ue8m0-masked", "ue8m0-unmasked"):
        read = consumer_read(s.reshape(-1, s.shape[-1]), s.shape[-1], consumer).view(s.shape)
        found = explain_operands("wo_a", [FormatOperands(x, s, w, ws)], [block_gemm(x, read, w, ws, torch.bfloat16)])
        assert found.outcome is Outcome.CORRECT_FROM_INPUTS, consumer
        assert [c.kinds for c in found.candidates] == [(StoryKind.CORRECT,)]  # nothing else is worth trying


def test_packed_words_read_as_fp32_and_codes_read_as_values():
    x, s, w, ws = grouped_op(ue8m0=True)
    packed = pack_exponents(s.reshape(-1, s.shape[-1]))
    act = consumer_read(packed, s.shape[-1], "fp32").view(s.shape)
    found = explain_operands("wo_a", [FormatOperands(x, packed, w, ws)], [block_gemm(x, act, w, ws, torch.bfloat16)])
    assert found.outcome is Outcome.EXPLAINED and found.story == (StoryKind.PACKED_SCALES_AS_VALUES,)
    held = codes_read_as_values(e8m0_codes(ws))
    out = block_gemm(x, s, w, held, torch.bfloat16)
    found = explain_operands("wo_a", [FormatOperands(x, s, w, held, weight_scale_intended=ws)], [out])
    assert found.story == (StoryKind.SCALE_CODES_AS_VALUES,)
    # Without the checkpoint's values the held numbers are all there is to go by: no story is claimed.
    found = explain_operands("wo_a", [FormatOperands(x, s, w, held)], [out])
    assert found.outcome is Outcome.CORRECT_FROM_INPUTS


def test_grouped_scales_written_token_major_and_read_group_major():
    x, s, w, ws = grouped_op(ue8m0=True)
    out = block_gemm(x, grouped_scale_read(s, "group-major"), w, ws, torch.bfloat16)
    found = explain_operands("wo_a", [FormatOperands(x, s, w, ws, act_rows_written="token-major")], [out])
    assert found.story == (StoryKind.GROUPED_SCALE_TOKEN_READ_AS_GROUP,)
    assert StoryKind.GROUPED_SCALE_TOKEN_READ_AS_GROUP.violation is md.layouts.ViolationKind.GROUPED_SCALE_ORDER
    # The same op written group-major has no order story to tell.
    found = explain_operands("wo_a", [FormatOperands(x, s, w, ws)], [block_gemm(x, s, w, ws, torch.bfloat16)])
    assert found.outcome is Outcome.CORRECT_FROM_INPUTS


def test_a_value_fault_gets_no_story():
    x, s, w, ws = grouped_op()
    out = block_gemm(x, s, w, ws, torch.bfloat16).clone()
    out[1, :, :8] *= 1.5  # some outputs wrong, no byte contract behind it
    found = explain_operands("wo_a", [FormatOperands(x, s, w, ws)], [out])
    assert found.outcome is Outcome.NO_STORY and found.story == ()


def test_nan_aware_error_and_bad_operands():
    a = torch.tensor([1.0, float("nan"), 2.0])
    assert nan_aware_rel_err(a, a.clone()) == 0.0
    assert nan_aware_rel_err(torch.tensor([1.0, 3.0, 2.0]), a) == float("inf")
    x, s, w, ws = grouped_op()
    with pytest.raises(TypeError, match=r"x: .* must be fp8 codes"):
        FormatOperands(x.to(torch.float32), s, w, ws)
    with pytest.raises(ValueError, match="one of each per rank"):
        explain_operands("wo_a", [FormatOperands(x, s, w, ws)], [])
    with pytest.raises(TypeError, match="held scale: .* is not E8M0 codes"):
        scale_readings(torch.zeros(2, 2, dtype=torch.float16), 2)


def test_explain_capture_tells_the_codes_story_of_a_captured_weight_scale():
    """A capture whose engine copied o_proj's E8M0 block-scale codes into its fp32 scale parameter (vLLM
    issue #43416's loader, planted on an attention linear): explain_capture names the story at o_proj."""
    cfg = dataclasses.replace(md.MLAConfig.preset("tiny"), scale_fmt="ue8m0", name="tiny-ue8m0")
    ckpt = md.Checkpoint.synthetic(cfg, seed=0)
    hidden = torch.randn(8, cfg.hidden_size, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    positions = torch.arange(8)
    run = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2)
    capture = run_capture(run, ckpt, hidden, positions)
    for rank in capture.ranks:
        t = rank.tensors
        scale = t["o_proj.weight_scale_inv"]
        held = codes_read_as_values(e8m0_codes(scale.tensor))
        t["o_proj.weight_scale_inv"] = dataclasses.replace(scale, tensor=held)
        x = t["o_proj.input"].tensor.to(torch.float32)
        codes, act, _ = group_quantize(x, 128, "e4m3fn", "vllm-cuda")
        partial = block_gemm(codes, act, t["o_proj.weight"].tensor, held, torch.float32)
        t["o_proj.output"] = dataclasses.replace(t["o_proj.output"], tensor=partial.to(torch.bfloat16))
    found = explain_capture(capture, ckpt, steps=["o_proj"]).of("o_proj")
    assert found.outcome is Outcome.EXPLAINED and found.story == (StoryKind.SCALE_CODES_AS_VALUES,)
    assert found.story[0].violation is md.layouts.ViolationKind.SCALE_CODES_AS_VALUES
