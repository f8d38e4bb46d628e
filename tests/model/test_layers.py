"""MLA (V3) and DeepSeek-V4 layers: step programs, TP invariance, layout bugs reproduced by mechanics,
bad input and non-finite values."""

from __future__ import annotations

import pytest
import torch
from layer_steps import V3_DECODE_STEPS, V3_PREFILL_STEPS, V4_STEPS

import mla_debug as md
from mla_debug.layouts import ViolationKind


@pytest.fixture(scope="module")
def tiny():
    cfg = md.MLAConfig.preset("tiny")
    return cfg, md.Checkpoint.synthetic(cfg, seed=0)


@pytest.fixture(scope="module")
def tiny_v4():
    cfg = md.MLAConfig.preset("tiny-v4")
    return cfg, md.Checkpoint.synthetic(cfg, seed=0)


@pytest.fixture(scope="module")
def tuned_kv_b():
    """tiny with kv_lora_rank 512: kv_b_proj is (4096, 512) at TP1, a shape in aiter's gfx950 table."""
    cfg = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
    return cfg, md.Checkpoint.synthetic(cfg, seed=3)


def tokens(cfg, n=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, cfg.hidden_size, generator=gen), torch.arange(n)


def rel(a, b):
    return md.numerics.error_metrics(a, b)["rel_l2"]


def test_step_programs_are_stable(tiny, tiny_v4):
    cfg, ckpt = tiny
    hidden, positions = tokens(cfg)
    assert md.run_layer(cfg, ckpt, hidden, positions).step_names == V3_PREFILL_STEPS
    assert md.run_layer(cfg, ckpt, hidden, positions, mode="decode").step_names == V3_DECODE_STEPS
    cfg4, ckpt4 = tiny_v4
    assert md.run_layer(cfg4, ckpt4, *tokens(cfg4)).step_names == V4_STEPS


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_gathered_steps_do_not_depend_on_tp(tiny, mode):
    """Column-parallel steps are per-head and see identical inputs at every TP size, so they match
    bitwise; only the row-parallel output (bf16 partial sums) differs by rounding."""
    cfg, ckpt = tiny
    hidden, positions = tokens(cfg)
    runs = {tp: md.run_layer(cfg, ckpt, hidden, positions, tp_size=tp, mode=mode) for tp in (1, 2, 4, 8)}
    for tp in (2, 4, 8):
        for name in runs[1].step_names[:-2]:
            assert torch.equal(runs[tp].records[name].output, runs[1].records[name].output), (tp, name)
        # partial sums of bf16 per-rank outputs: a few bf16 roundings of error at most
        assert rel(runs[tp].output, runs[1].output) < 1e-2
        assert runs[tp].records["q_b_proj"].output.shape == (16, cfg.num_heads * cfg.qk_head_dim)


def test_per_rank_records_and_partials(tiny):
    cfg, ckpt = tiny
    hidden, positions = tokens(cfg)
    run = md.run_layer(cfg, ckpt, hidden, positions, tp_size=4)
    partials = run.per_rank["o_proj"]
    assert [r.rank for r in partials] == [0, 1, 2, 3]
    total = sum(p.output.float() for p in partials)
    assert torch.equal(run.output, total.to(torch.bfloat16))
    assert run.per_rank["q_b_proj"][1].output.shape == (16, cfg.num_heads // 4 * cfg.qk_head_dim)


def test_decode_close_to_prefill_in_bf16(tiny):
    """Not equal: prefill quantizes kv_c to fp8 for kv_b_proj while decode absorbs in fp32."""
    cfg, ckpt = tiny
    hidden, positions = tokens(cfg)
    prefill = md.run_layer(cfg, ckpt, hidden, positions, mode="prefill")
    decode = md.run_layer(cfg, ckpt, hidden, positions, mode="decode")
    assert rel(decode.output, prefill.output) < 0.1


def test_kv_b_proj_relaid_under_absorbed_decode(tuned_kv_b):
    """PR #51692 shuffles kv_b_proj (tuned shape) although absorbed decode reads it raw: decode breaks,
    prefill (which reads kv_b_proj through the kernel) does not; honouring the flag (PR #56433) fixes it."""
    cfg, ckpt = tuned_kv_b
    hidden, positions = tokens(cfg)
    reference = {m: md.run_layer(cfg, ckpt, hidden, positions, mode=m) for m in ("prefill", "decode")}
    buggy = {
        m: md.run_layer(cfg, ckpt, hidden, positions, mode=m, platform="mi355x", scenario="vllm-pr51692")
        for m in ("prefill", "decode")
    }
    fixed = md.run_layer(cfg, ckpt, hidden, positions, mode="decode", platform="mi355x", scenario="vllm-pr56433")
    assert buggy["decode"].kernels["kv_b_proj"].kernel == "aiter-bpreshuffle"
    (violation,) = buggy["decode"].records["absorb_uk"].violations
    assert violation.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ and violation.effective
    assert rel(buggy["decode"].output, reference["decode"].output) > 0.5
    assert rel(buggy["prefill"].output, reference["prefill"].output) < 0.05
    assert fixed.records["absorb_uk"].violations == []
    assert rel(fixed.output, reference["decode"].output) < 0.05


def test_v4_pr51692_defects_and_the_fix(tiny_v4):
    cfg, ckpt = tiny_v4
    hidden, positions = tokens(cfg)
    reference = md.run_layer(cfg, ckpt, hidden, positions)
    buggy = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario="vllm-pr51692")
    kinds = {(name, v.kind) for name, r in buggy.records.items() for v in r.violations if v.effective}
    assert ("wo_a", ViolationKind.RELAID_WEIGHT_DIRECT_READ) in kinds  # is_bmm ignored
    assert ("wo_b", ViolationKind.DOUBLE_SHUFFLE) in kinds  # model + kernel shuffle
    assert ("q_norm", ViolationKind.CONSUMERS_DISAGREE) in kinds
    assert rel(buggy.output, reference.output) > 0.5
    fixed = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario="vllm-pr56433")
    assert not any(v.effective for v in fixed.violations)
    assert rel(fixed.output, reference.output) < 0.05
    assert any("consumers disagree" in note for note in fixed.records["q_norm"].notes)


def test_v4_fused_producer_feeds_both_consumers(tiny_v4):
    """With a ROW_MAJOR-reading consumer pair (baseline: no preshuffled kernel), the fused producer's
    pre-quantized q-lora is read correctly by both and close to the unfused path."""
    cfg, ckpt = tiny_v4
    hidden, positions = tokens(cfg)
    baseline = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario="vllm-baseline")
    assert baseline.records["q_norm"].kernel == "fused_qk_rmsnorm_group_quant (torch)"
    assert not any(v.effective for v in baseline.violations)
    reference = md.run_layer(cfg, ckpt, hidden, positions)
    assert rel(baseline.records["wq_b"].output, reference.records["wq_b"].output) < 0.05


def test_v4_scenario_chooses_the_producer_backend(tiny_v4):
    """The Triton producer (the interpreter on CPU-only machines, compiled on a GPU) gives the layer
    bitwise the torch producer's output: same rounding steps, same bytes."""
    pytest.importorskip("triton")
    cfg, ckpt = tiny_v4
    hidden, positions = tokens(cfg, n=4)
    base = md.scenario("vllm-baseline")
    runs = {}
    for backend in ("torch", "triton"):
        scen = md.scenario(
            {"base": "vllm-baseline", "name": f"b-{backend}", "behaviour": {"norm_quant_backend": backend}}
        )
        assert scen.behaviour.v4_fused_norm_quant == base.behaviour.v4_fused_norm_quant
        device = "cuda" if torch.cuda.is_available() else "cpu"
        runs[backend] = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario=scen, device=device)
        assert runs[backend].records["q_norm"].kernel == f"fused_qk_rmsnorm_group_quant ({backend})"
    assert torch.equal(runs["torch"].output, runs["triton"].output)


def dense_twin(cfg, ckpt):
    """The same weights, dequantized, as an unquantized checkpoint: the fp32 truth of the fp8 layer."""
    state = {f"{m}.weight": ckpt.dense_weight(m) for m in ckpt.linear_modules()}
    state.update({f"{m}.weight": ckpt.norm_weight(m) for m in ckpt.norm_modules()})
    return md.Checkpoint.from_state_dict(cfg, state, quantize=False)


def test_fnuz_platform_converts_checkpoint_bytes(tiny):
    """On gfx942 the e4m3fn checkpoint is reinterpreted as e4m3fnuz (scale x2, values unchanged); its
    error against the fp32 truth is the same FP8 noise as on e4m3fn (the two noises differ from each
    other by about sqrt(2) times that, so they are compared to the truth, not to each other)."""
    cfg, ckpt = tiny
    hidden, positions = tokens(cfg)
    fnuz = md.run_layer(cfg, ckpt, hidden, positions, platform="mi300x", scenario="vllm-pr51692", tp_size=2)
    assert any("e4m3fn -> e4m3fnuz" in e for e in fnuz.events["q_b_proj"])
    assert fnuz.kernels["q_b_proj"].kernel == "aiter-blockscale"  # 304 CUs: no tuned row ever matches
    fn = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2)
    truth = md.run_layer(cfg, dense_twin(cfg, ckpt), hidden, positions, tp_size=2, dtype=torch.float32)
    e_fn, e_fnuz = rel(fn.output, truth.output), rel(fnuz.output, truth.output)
    assert e_fnuz < 1.5 * e_fn and e_fn < 0.1


def test_recording_off_gives_the_same_output(tiny):
    cfg, ckpt = tiny
    hidden, positions = tokens(cfg)
    layer = md.MLALayer(cfg, ckpt, tp_size=2)
    full = layer.run(hidden, positions)
    bare = layer.run(hidden, positions, record=False)
    assert list(bare.records) == ["all_reduce"] and torch.equal(bare.output, full.output)
    # New inputs on a layer that memoizes replicated GEMMs: freed tensors' addresses get reused, and
    # the memo must never mistake a new input for an old one.
    for seed in (1, 2, 3):
        other, _ = tokens(cfg, seed=seed)
        again = layer.run(other, positions, record=False)
        assert torch.equal(again.output, md.MLALayer(cfg, ckpt, tp_size=2).run(other, positions).output)


def test_stepping_yields_records_in_order(tiny):
    cfg, ckpt = tiny
    layer = md.MLALayer(cfg, ckpt, tp_size=2, platform="mi355x", scenario="vllm-pr51692")
    names = [record.name for record in layer.steps(*tokens(cfg, 4), mode="decode")]
    assert names == V3_DECODE_STEPS and set(layer.last_per_rank) == set(V3_DECODE_STEPS)
    assert "aiter" in layer.kernels["o_proj"].kernel or "reference" in layer.kernels["o_proj"].kernel


def test_nan_and_inf_flow_into_stats(tiny):
    cfg, ckpt = tiny
    hidden, positions = tokens(cfg)
    hidden[3, 5] = float("nan")
    hidden[7, 9] = float("inf")
    run = md.run_layer(cfg, ckpt, hidden, positions)
    assert run.records["fused_qkv_a"].stats.nan > 0
    assert run.records["all_reduce"].stats.nan > 0
    clean_rows = [r for r in range(16) if r < 3]
    assert torch.isfinite(run.output[clean_rows].float()).all()


def test_bad_input_is_named(tiny):
    cfg, ckpt = tiny
    hidden, positions = tokens(cfg)
    with pytest.raises(ValueError, match="tp_size=3 does not divide num_heads=16"):
        md.run_layer(cfg, ckpt, hidden, positions, tp_size=3)
    with pytest.raises(ValueError, match=r"hidden: shape \(16, 256\).*hidden_size=512"):
        md.run_layer(cfg, ckpt, hidden[:, :256], positions)
    with pytest.raises(TypeError, match="hidden: .*int64"):
        md.run_layer(cfg, ckpt, hidden.long(), positions)
    with pytest.raises(ValueError, match="positions: values 0..163840 are outside"):
        md.run_layer(cfg, ckpt, hidden, positions.clone().index_fill_(0, torch.tensor([15]), 163840))
    with pytest.raises(ValueError, match="positions: .*one position per token"):
        md.run_layer(cfg, ckpt, hidden, positions[:5])
    with pytest.raises(ValueError, match="mode 'verify' is not one of prefill, decode"):
        md.run_layer(cfg, ckpt, hidden, positions, mode="verify")
    with pytest.raises(ValueError, match="unknown scenario 'vllm'; valid: reference"):
        md.run_layer(cfg, ckpt, hidden, positions, scenario="vllm")
    other = md.MLAConfig.preset("tiny").with_(name="other", num_heads=8)
    with pytest.raises(ValueError, match="differs from 'other' in \\['num_heads'\\]"):
        md.run_layer(other, ckpt, hidden, positions)
    with pytest.raises(ValueError, match="executor 'mpi'"):
        md.run_layer(cfg, ckpt, hidden, positions, executor="mpi")
