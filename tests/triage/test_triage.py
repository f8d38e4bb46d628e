"""Run diffs, noise floors, TP triage and culprit bisection, on small configs whose per-rank shapes hit
aiter's gfx950 tuned table (so the preshuffled kernel is chosen and the bugs appear)."""

from __future__ import annotations

import json
import math

import pytest
import torch

import mla_debug as md
import mla_debug.triage as A
import mla_debug.verdict as V
from mla_debug.layouts import ViolationKind


@pytest.fixture(scope="module")
def kv512_bench():
    """tiny with kv_lora_rank 512: kv_b_proj per rank is (4096/t, 512) - in the table at every TP size."""
    cfg = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
    return A.TriageSession(cfg, "mi355x", tokens=8)


@pytest.fixture(scope="module")
def buggy(kv512_bench):
    return A.triage(scenario="vllm-pr51692", tp_sizes=(1, 2), session=kv512_bench, progress=False)


def test_noise_floor_is_the_fp8_cost_of_a_correct_run(kv512_bench):
    floor = kv512_bench.floor(2, "prefill")
    assert set(floor) == set(kv512_bench.reference(2, "prefill").step_names)
    assert 1e-3 < floor["q_b_proj"] < 0.1  # FP8 weights and activations against fp32 truth
    assert floor["q_a_layernorm"] > 0  # downstream of the first FP8 GEMM
    assert V.threshold(floor["q_b_proj"]) == V.DIVERGENCE_FACTOR * floor["q_b_proj"]
    assert V.threshold(0.0) == V.MIN_THRESHOLD


def test_a_correct_run_compared_with_itself_does_not_diverge(kv512_bench):
    reference = kv512_bench.reference(1, "decode")
    diff = A.compare(reference, reference, kv512_bench.floor(1, "decode"))
    assert not diff.diverged and diff.first_divergent_step is None
    assert all(s.rel_err == 0.0 and s.classification == "quantization noise only" for s in diff.steps)
    table = diff.table
    assert list(table["step"]) == reference.step_names and not table["diverged"].any()


def test_triage_finds_the_relaid_kv_b_proj_in_decode_only(buggy):
    for tp in (1, 2):
        assert buggy.config(tp, "prefill").verdict == "ok"
        decode = buggy.config(tp, "decode")
        assert decode.verdict == "diverged" and decode.diff.first_divergent_step == "absorb_uk"
        first = decode.diff.first_divergent
        assert first.classification == "weight relaid under a direct reader"
        assert first.rel_err > first.threshold > first.floor > 0
        assert any(v.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ for v in first.effective_violations)
    summary = buggy.summary
    assert list(summary["verdict"]) == ["ok", "diverged", "ok", "diverged"]
    assert buggy.error_matrix("decode").loc[1, "absorb_uk"] > 0.5


def test_bisection_names_the_flag_that_restores_decode(buggy):
    assert [(c.tp, c.mode) for c in buggy.culprits] == [(1, "decode"), (2, "decode")]
    culprit = buggy.culprits[1]
    assert culprit.step == "absorb_uk" and culprit.layer == "kv_b_proj"
    assert culprit.change == "honouring skip_weight_relayout in aiter-bpreshuffle"
    assert culprit.explanation == (
        "kv_b_proj at TP2: aiter-bpreshuffle re-laid out the weight that absorbed decode (W_UK/W_UV) reads "
        "directly; honouring skip_weight_relayout in aiter-bpreshuffle restores decode"
    )
    assert not buggy.unresolved


def test_the_fix_scenario_is_clean(kv512_bench):
    fixed = A.triage(scenario="vllm-pr56433", tp_sizes=(1, 2), session=kv512_bench, progress=False)
    assert all(c.verdict == "ok" for c in fixed.configs) and fixed.culprits == []


def test_block_errors_localise_the_damage(buggy):
    errors = buggy.block_errors(2, "decode")
    run = buggy.config(2, "decode").diff.run
    tokens, width = run.records["absorb_uk"].output.reshape(8, -1).shape
    assert errors.shape == (tokens, math.ceil(width / 128)) and (errors > 0.1).all()
    assert (buggy.block_errors(2, "prefill", "q_b_proj") < 0.05).all()
    clean = A.block_errors(torch.ones(4, 256), torch.ones(4, 256))
    assert torch.equal(clean, torch.zeros(4, 2))
    spot = torch.ones(4, 256)
    spot[2, 130] = 5.0
    located = A.block_errors(spot, torch.ones(4, 256))
    assert located.nonzero().tolist() == [[2, 1]]


def test_v4_needs_three_fixes_at_tp1_and_one_at_tp8():
    session = A.TriageSession("tiny-v4", "mi355x", tokens=8)
    result = A.triage(scenario="vllm-pr51692", tp_sizes=(1, 8), session=session, progress=False)
    by_config = {(c.tp, c.mode): c for c in result.culprits}
    tp1 = {change.target for change in by_config[(1, "prefill")].changes}
    assert tp1 == {"aiter-bpreshuffle", "v4_ask_consumers", "skip_model_shuffle_if_kernel_preshuffles"}
    tp8 = by_config[(8, "prefill")]
    assert [c.target for c in tp8.changes] == ["v4_ask_consumers"] and tp8.layer == "q_norm"
    # Patching agrees from the other side: three steps hold a fault at TP1, one at TP8.
    assert result.patching[(1, "prefill")].restoring_steps == ("indexer_q", "wo_a", "wo_b")
    assert result.patching[(8, "prefill")].restoring_steps == ("indexer_q",)


def test_json_follows_the_schema_and_never_overwrites(buggy, tmp_path):
    path = buggy.to_json(tmp_path / "triage.json")
    data = json.loads(path.read_text())
    assert {"model", "platform", "scenario", "tokens", "device", "runs", "culprits"} <= set(data)
    assert {"schema", "provenance", "bisection", "culprit_groups", "unresolved", "seed", "tp_sizes"} <= set(data)
    assert data["schema"] == 6 and "block_errors" in data and data["profile"] is None
    assert data["positions"] == {"start": 0, "explicit": None} and data["caveats"] == []
    assert data["model"] == "tiny-kv512" and data["tokens"] == 8 and data["scenario"] == "vllm-pr51692"
    run = data["runs"][1]
    assert {"tp", "mode", "verdict", "first_divergent_step", "steps", "kernels"} <= set(run)
    assert (run["tp"], run["mode"], run["verdict"], run["first_divergent_step"]) == (
        1,
        "decode",
        "diverged",
        "absorb_uk",
    )
    step = run["steps"][0]
    assert {"name", "kernel", "rel_err", "violations", "selection", "scale_layout", "weight_layout"} <= set(step)
    assert isinstance(step["rel_err"], float)
    assert {"floor", "threshold", "diverged", "classification", "stats"} <= set(step)
    absorb = next(s for s in run["steps"] if s["name"] == "absorb_uk")
    assert absorb["diverged"] is True and absorb["rel_err"] > absorb["threshold"] > absorb["floor"] > 0
    (detail,) = [v for v in absorb["violations"] if v["effective"]]
    assert detail["kind"] == "direct-read-of-relaid-weight" and detail["expected"] == {"type": "weight", "layout": None, "direct": True}
    assert set(absorb["stats"]) == {"amax", "nan", "inf"} and absorb["stats"]["nan"] == 0
    # The weight layout is data: kv_b_proj shuffled once by the preshuffled kernel, read directly.
    (shuffle,) = absorb["weight_layout"]["transforms"]
    assert shuffle["kind"] == "shuffle" and shuffle["layout"] == [16, 16] and "aiter-bpreshuffle" in shuffle["by"]
    kv_b = next(s for s in data["runs"][0]["steps"] if s["name"] == "kv_b_proj")
    assert kv_b["kernel"] == "aiter-bpreshuffle" and kv_b["selection"]["kernel"] == "aiter-bpreshuffle"
    assert "tuned row" in kv_b["selection"]["reason"] and not kv_b["selection"]["override"]
    assert kv_b["scale_layout"] == {"written": "col_major", "read_as": "col_major"}
    assert data["runs"][0]["kernels"]["kv_b_proj"] == kv_b["selection"]
    (blocks,) = [b for b in data["block_errors"] if (b["tp"], b["mode"]) == (1, "decode")]
    assert blocks["step"] == "absorb_uk" and len(blocks["errors"]) == 8 and blocks["block"] == 128
    assert {"tp", "mode", "step", "change", "explanation"} <= set(data["culprits"][0])
    again = buggy.to_json(tmp_path / "triage.json")
    assert again.name == "triage-2.json" and path.read_text() == again.read_text()


def test_bad_input():
    with pytest.raises(ValueError, match="unknown preset 'deepseek-v9'; valid: deepseek-v3"):
        A.TriageSession("deepseek-v9")
    with pytest.raises(ValueError, match="unknown platform 'mi250'"):
        A.TriageSession("tiny", "mi250")
    with pytest.raises(ValueError, match="tokens=0 must be >= 1"):
        A.TriageSession("tiny", tokens=0)
    session = A.TriageSession("tiny", tokens=2)
    with pytest.raises(ValueError, match="unknown scenario 'vllm'; valid"):
        A.triage(scenario="vllm", session=session)
    with pytest.raises(ValueError, match="tp_size=3 does not divide num_heads=16"):
        A.triage(scenario="reference", tp_sizes=(1, 3), session=session)
    with pytest.raises(ValueError, match="mode 'verify'"):
        A.triage(scenario="reference", modes=("verify",), session=session)


def test_triage_reads_a_users_checkpoint_folder(tmp_path):
    cfg = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
    folder = md.Checkpoint.synthetic(cfg, seed=7).save(tmp_path / "ckpt")
    result = A.triage(
        scenario="vllm-pr51692", tp_sizes=(2,), modes=("decode",), tokens=4, checkpoint=folder, progress=False
    )
    assert result.model == "ckpt" and result.config(2, "decode").verdict == "diverged"
    assert result.culprits[0].layer == "kv_b_proj"


def test_triage_rejects_a_bad_tp_size_before_building_weights(monkeypatch):
    from mla_debug.model import Checkpoint

    def refuse(*args, **kwargs):
        raise AssertionError("weights were built before the TP sizes were checked")

    monkeypatch.setattr(Checkpoint, "synthetic", classmethod(refuse))
    with pytest.raises(ValueError, match="tp_size=3 does not divide num_heads=128"):
        md.triage("deepseek-v3", "mi355x", "vllm-pr51692", tp_sizes=(1, 3))
