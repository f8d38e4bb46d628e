"""md.scan on transformers' own DeepSeek-V3 (5 layers, bf16) under transformers' own tensor parallelism:
a clean TP2-vs-TP4 pair (whose bf16 sums already differ in every layer) names no layer; a TP4 run with
kv_b_proj shuffled in layer DEFECT_LAYER only is named at that layer's attention output, the layers
after it being shown as inheriting the difference. In-process TP1 scans check the summaries against the
model's own hidden states (output_hidden_states), byte for byte."""

from __future__ import annotations

import json

import pytest
import torch
from scan_models import DEFECT_LAYER, LAYERS, TOKENS, input_ids, save_tiny_model, tiny_config

import mla_debug as md
from mla_debug.capture import ScanStep
from mla_debug.capture.scan import checksum, sample_columns
from mla_debug.explain.scan_compare import ScanComparison, StepOutcome

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")


@pytest.fixture(scope="module")
def clean(tp2, tp4) -> ScanComparison:
    return md.compare_scans(md.capture.load_scan(tp2.scan), md.capture.load_scan(tp4.scan))


@pytest.fixture(scope="module")
def planted(tp2, tp4_planted) -> ScanComparison:
    return md.compare_scans(md.capture.load_scan(tp2.scan), md.capture.load_scan(tp4_planted.scan))


def test_a_clean_tp2_vs_tp4_pair_names_no_layer(clean):
    assert clean.first_divergent is None and clean.capture_call is None
    assert [layer.layer for layer in clean.layers] == list(range(LAYERS))
    steps = [s for layer in clean.layers for s in layer.steps]
    assert len(steps) == 4 * LAYERS and all(s.outcome in (StepOutcome.AGREES, StepOutcome.INHERITED) for s in steps)
    # The embeddings match exactly; every later step differs a little (bf16 sums in another order).
    assert clean.layer(0).step(ScanStep.LAYER_INPUT).rel_err == 0.0
    assert all(0 < s.rel_err < 0.05 for s in steps[2:])
    # Replicated tensors (the stream, the all-reduced attention output) hold the same bytes on every rank.
    assert not any(s.disagreeing_ranks for s in steps)


def test_the_planted_layer_is_named_and_the_layers_after_it_inherit(planted):
    first = planted.first_divergent
    assert first is not None and (first.layer, first.step) == (DEFECT_LAYER, ScanStep.ATTN_OUTPUT)
    assert planted.diverged_layers == [DEFECT_LAYER]
    assert first.rel_err > 0.5 and first.input_err < 0.05  # its input barely differs: the layer is the source
    for layer in planted.layers:
        if layer.layer < DEFECT_LAYER:
            assert layer.outcome in (StepOutcome.AGREES, StepOutcome.INHERITED), layer.layer
        elif layer.layer > DEFECT_LAYER:
            assert layer.outcome is StepOutcome.INHERITED, layer.layer
            assert layer.step(ScanStep.LAYER_INPUT).input_err > 0.5  # the inherited difference, shown as such
    assert f"layer={DEFECT_LAYER}" in planted.capture_call and "md.capture(model" in planted.capture_call
    assert len(first.tokens_over) == TOKENS  # every token's row is wrong: a weight defect, not a routing flip


def test_a_scan_comparison_round_trips_through_json(planted, tmp_path):
    path = planted.to_json(tmp_path / "cmp.json")
    again = ScanComparison.load(path)
    assert again.to_dict() == planted.to_dict()
    assert again.first_divergent.layer == DEFECT_LAYER and json.loads(path.read_text())["kind"] == "scan-comparison"


def test_scans_hold_one_folder_per_rank_and_agree_across_ranks(tp4):
    scan = md.capture.load_scan(tp4.scan)
    assert scan.tp_size == 4 and [r.rank for r in scan.ranks] == [0, 1, 2, 3]
    assert scan.manifest.engine == "transformers" and scan.manifest.layers == tuple(range(LAYERS))
    first = scan.rank(0).summaries
    for rank in scan.ranks[1:]:
        for key, summary in rank.summaries.items():
            assert summary.checksum == first[key].checksum, (rank.rank, key)


@pytest.fixture(scope="module")
def tp1_model(tmp_path_factory):
    folder = save_tiny_model(tmp_path_factory.mktemp("tp1-model") / "model", dtype=torch.float32)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


def test_summaries_are_the_models_own_hidden_states(tp1_model, tmp_path):
    with md.scan(tp1_model, tmp_path / "scan", columns=64, rows=2, tokens=[0, 3, 11]) as s, torch.no_grad():
        out = tp1_model(input_ids(), output_hidden_states=True)
    scan = md.capture.load_scan(tmp_path / "scan")
    assert s.path == tmp_path / "scan" / "rank0-of-1"
    columns = sample_columns(256, 64)
    assert list(scan.manifest.columns) == columns and scan.manifest.row_tokens == (3, 11)
    for layer in range(LAYERS):  # hidden_states[i] is what layer i receives
        hidden = out.hidden_states[layer].reshape(TOKENS, -1)
        summary = scan.rank(0).get(layer, ScanStep.LAYER_INPUT)
        assert summary.checksum == checksum(out.hidden_states[layer])
        assert torch.equal(summary.columns, hidden[[0, 3, 11]][:, columns])
        assert torch.allclose(summary.token_norms, hidden[[0, 3, 11]].norm(dim=1), rtol=1e-6)
        if layer + 1 < LAYERS:
            after = scan.rank(0).get(layer, ScanStep.LAYER_OUTPUT)
            assert after.checksum == scan.rank(0).get(layer + 1, ScanStep.LAYER_INPUT).checksum
            assert torch.equal(after.rows, out.hidden_states[layer + 1].reshape(TOKENS, -1)[[3, 11]])


def test_a_scan_of_a_model_against_itself_is_the_same_everywhere(tp1_model, tmp_path):
    for name in ("a", "b"):
        with md.scan(tp1_model, tmp_path / name), torch.no_grad():
            tp1_model(input_ids())
    cmp = md.compare_scans(md.capture.load_scan(tmp_path / "a"), md.capture.load_scan(tmp_path / "b"))
    assert cmp.first_divergent is None
    assert all(s.outcome is StepOutcome.AGREES and s.rel_err == 0.0 for layer in cmp.layers for s in layer.steps)


def test_a_scan_refuses_to_overwrite_and_explains_what_it_cannot_scan(tp1_model, tmp_path):
    with md.scan(tp1_model, tmp_path / "s"), torch.no_grad():
        tp1_model(input_ids())
    with pytest.raises(FileExistsError, match="rank0-of-1 already exists"):
        md.scan(tp1_model, tmp_path / "s")
    with pytest.raises(ValueError, match="no modules at '...layers.<N>'"):
        md.scan(torch.nn.Linear(4, 4), tmp_path / "x")
    with pytest.raises(ValueError, match="residual_access"):
        md.scan(tp1_model, tmp_path / "y", engine="sglang")
    with pytest.raises(RuntimeError, match="called fewer than 1"), md.scan(tp1_model, tmp_path / "z"):
        pass  # no forward inside the block
    assert not (tmp_path / "z").exists()


def test_scans_of_other_tokens_are_not_compared(tp1_model, tmp_path):
    for name, tokens in (("a", [0, 1]), ("b", [0, 2])):
        with md.scan(tp1_model, tmp_path / name, tokens=tokens), torch.no_grad():
            tp1_model(input_ids())
    with pytest.raises(ValueError, match="kept other token rows"):
        md.compare_scans(md.capture.load_scan(tmp_path / "a"), md.capture.load_scan(tmp_path / "b"))


def test_the_first_layers_input_must_match_exactly(tp1_model, tmp_path):
    """Other token ids: the embeddings differ, and the scan says so at layer 0's input."""
    with md.scan(tp1_model, tmp_path / "a"), torch.no_grad():
        tp1_model(input_ids())
    with md.scan(tp1_model, tmp_path / "b"), torch.no_grad():
        tp1_model(input_ids().flip(1))
    cmp = md.compare_scans(md.capture.load_scan(tmp_path / "a"), md.capture.load_scan(tmp_path / "b"))
    assert (cmp.first_divergent.layer, cmp.first_divergent.step) == (0, ScanStep.LAYER_INPUT)


def test_the_scan_config_is_recorded(tmp_path):
    model = transformers.DeepseekV3ForCausalLM(tiny_config(torch.float32, layers=2)).eval()
    with md.scan(model, tmp_path / "s"), torch.no_grad():
        model(input_ids())
    manifest = md.capture.load_scan(tmp_path / "s").manifest
    assert manifest.model_type == "deepseek_v3" and manifest.hf_config["num_hidden_layers"] == 2
    assert manifest.layer_path == "model.layers.{layer}" and manifest.map_key == "transformers-deepseek_v3"
