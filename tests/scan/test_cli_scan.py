"""`mla-debug scan run|show|compare`, `capture import-sglang` and `capture export --format sglang` as a
user types them (mla_debug.cli.main in this process)."""

from __future__ import annotations

import pytest
import torch
from scan_models import DEFECT_LAYER, dumped, save_tiny_model
from torchrun_launch import run_torchrun

import mla_debug as md
from mla_debug.cli.main import main

pytest.importorskip("transformers")


def test_scan_compare_names_the_planted_layer_and_prints_the_capture_call(tp2, tp4_planted, tmp_path, capsys):
    assert main(["scan", "compare", str(tp2.scan), str(tp4_planted.scan), "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert f"the divergence starts in layer {DEFECT_LAYER} at attn.output" in out
    assert f'md.capture(model, "captures/layer{DEFECT_LAYER}-tp4", layer={DEFECT_LAYER}' in out
    assert f"layer {DEFECT_LAYER + 1}: differs by what its input passed on" in out
    assert md.explain.ScanComparison.load(tmp_path / "c.json").first_divergent_layer == DEFECT_LAYER


def test_scan_compare_of_a_clean_pair_says_so(tp2, tp4, capsys):
    assert main(["scan", "compare", str(tp2.scan), str(tp4.scan)]) == 0
    assert "no layer diverges beyond what its input explains" in capsys.readouterr().out


def test_scan_run_and_show(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "model", dtype=torch.float32, layers=2)
    assert main(["scan", "run", str(model), str(tmp_path / "scan"), "--length", "8"]) == 0
    assert main(["scan", "show", str(tmp_path / "scan")]) == 0
    out = capsys.readouterr().out
    assert "scan written" in out and "2 layers (model.layers.{layer})" in out and "TP1" in out
    assert main(["scan", "run", str(model), str(tmp_path / "scan")]) == 2  # never overwritten
    assert "already exists" in capsys.readouterr().err


def test_scan_run_under_torchrun_writes_every_rank_and_ends_cleanly(tmp_path):
    """`mla-debug scan run --tp-plan auto` under torchrun, as docs/capture.md gives it: every rank writes its
    folder and the command ends with status 0 (each rank leaves through `leave_rank`)."""
    model = save_tiny_model(tmp_path / "model", dtype=torch.float32, layers=2)
    out = run_torchrun(
        "mla_debug.cli", 2, "scan", "run", str(model), str(tmp_path / "scan"), "--tp-plan", "auto", "--length", "8"
    )
    assert out.count("scan written") == 2
    scan = md.capture.load_scan(tmp_path / "scan")
    assert scan.manifest.tp_size == 2 and len(scan.manifest.layers) == 2


def test_import_sglang_then_diff_and_export(tp2, tp4_planted, model_dir, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["capture", "import-sglang", str(dumped(tp2)), str(a), "--config", str(model_dir)]) == 0
    assert main(["capture", "import-sglang", str(dumped(tp4_planted)), str(b), "--config", str(model_dir)]) == 0
    capsys.readouterr()
    ckpt = md.Checkpoint.load(model_dir, layer=DEFECT_LAYER)
    diff = md.diff_captures(md.load_capture(a), md.load_capture(b), ckpt)
    assert "kv_b_proj" in diff.diverged_steps
    assert main(["capture", "export", str(a), str(tmp_path / "out"), "--format", "sglang"]) == 0
    assert "sglang.srt.debug_utils.comparator" in capsys.readouterr().out
    assert any((tmp_path / "out" / "dump").glob("step=0___rank=1___*kv_b_proj.output*.pt"))
