"""`mla-debug capture show DIR`: a capture's manifest and, per rank, every tensor's layout and attributes."""

from __future__ import annotations

import re

import torch

from mla_debug.capture import CapturedTensor, CaptureManifest, EngineInfo, RankCapture, Shard, TensorRole
from mla_debug.capture.store import write_rank
from mla_debug.cli import main
from mla_debug.model import MLAConfig


def write_tp2(out):
    manifest = CaptureManifest(
        EngineInfo("vllm", "0.33.0"), MLAConfig.preset("tiny"), layer=3, tp_size=2, positions=(7, 9), tokens=(0, 2),
        mode="decode", versions={"torch": "2.13"},
    )
    for rank in (0, 1):
        weight = torch.zeros(128, 64, dtype=torch.float8_e4m3fn)
        scale = torch.ones(2, 6)[:, 1:].t()  # (5, 2), strides (1, 6), offset 1
        tensors = {
            "kv_b_proj.weight": CapturedTensor(
                "kv_b_proj.weight", TensorRole.WEIGHT, weight, "kv_b_proj", attrs={"aiter_bpreshuffled": True},
                shard=Shard.SPLIT, shard_dim=0,
            ),
            "q_b_proj.input_scale": CapturedTensor("q_b_proj.input_scale", TensorRole.INPUT_SCALE, scale, "q_b_proj"),
        }
        write_rank(out, manifest, RankCapture(rank, 2, tensors))
    return out


def test_show_prints_the_manifest_and_every_tensors_layout(tmp_path, capsys):
    out = write_tp2(tmp_path / "cap")
    assert main(["capture", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "vllm 0.33.0, tiny layer 3, tp_size 2, mode decode" in text
    assert "kept token rows (2): [0, 2]" in text and "their positions: [7, 9]" in text
    assert text.count("rank 0 of 2: 2 tensors") == 1 and "rank 1 of 2: 2 tensors" in text
    rows = [re.split(r"\s{2,}", line) for line in text.splitlines() if line.startswith(("kv_b_proj", "q_b_proj"))]
    assert rows[0] == [
        "kv_b_proj.weight", "weight", "kv_b_proj", "float8_e4m3fn", "(128, 64)", "(64, 1)", "0", "split dim 0",
        "aiter_bpreshuffled=True",
    ]
    assert rows[1][4:8] == ["(5, 2)", "(1, 6)", "1", "replicated"]


def test_show_one_rank(tmp_path, capsys):
    out = write_tp2(tmp_path / "cap")
    assert main(["capture", "show", str(out), "--rank", "1"]) == 0
    text = capsys.readouterr().out
    assert "rank 1 of 2" in text and "rank 0 of 2" not in text


def test_show_names_a_missing_rank_as_an_error(tmp_path, capsys):
    out = write_tp2(tmp_path / "cap")
    for path in (out / "rank1-of-2").iterdir():
        path.unlink()
    (out / "rank1-of-2").rmdir()
    assert main(["capture", "show", str(out)]) == 2
    assert "mla-debug capture show: error: load_capture:" in capsys.readouterr().err
