"""Captures written in SGLang 0.5.23's dumper layout and read by SGLang's own comparator (python -m
sglang.srt.debug_utils.comparator from the released wheel, run as a user would): it merges the TP shards by
the dims mla_debug writes, passes a clean TP2-vs-TP4 pair and fails the planted layer's kv_b_proj output.
The export reads back into the same capture, byte for byte."""

from __future__ import annotations

import json

import pytest
import sglang_package
import torch

import mla_debug as md
from mla_debug.capture import export_sglang_dump

pytest.importorskip("transformers")
pytest.importorskip("polars")


def records(done) -> list[dict]:
    assert done.stdout, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def comparisons(done) -> dict[str, bool]:
    """{dumped name: passed} of the comparator's tensor comparisons."""
    return {r["name"]: r["diff"]["passed"] for r in records(done) if r.get("type") == "comparison_tensor"}


@pytest.fixture(scope="module")
def exported(tp2, tp4, tp4_planted, tmp_path_factory):
    folder = tmp_path_factory.mktemp("exported")
    return {
        label: export_sglang_dump(md.load_capture(run.capture), folder / label)
        for label, run in (("tp2", tp2), ("tp4", tp4), ("planted", tp4_planted))
    }


def test_an_export_reads_back_into_the_same_capture(tp2, exported):
    original = md.load_capture(tp2.capture)
    back = md.capture.load_sglang_dump(exported["tp2"], config=original.cfg)
    assert back.tp_size == 2 and back.manifest.positions == original.manifest.positions
    for name in back.names():
        for rank in (0, 1):
            assert torch.equal(back.rank(rank)[name].tensor, original.rank(rank)[name].tensor), name
            assert back.rank(rank)[name].shard is original.rank(rank)[name].shard, name


def test_sglangs_comparator_passes_a_clean_tp2_vs_tp4_pair(exported, sglang_root):
    if sglang_root is None:
        pytest.skip("the sglang 0.5.23 wheel is not fetched")
    done = sglang_package.run_comparator(
        exported["tp2"], exported["tp4"], "--grouping-skip-keys", "rank", "--diff-threshold", "0.01"
    )
    found = comparisons(done)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "non_intrusive__model.layers.2.self_attn.kv_b_proj.output" in found and all(found.values()), found
    summary = [r for r in records(done) if r.get("type") == "summary"][0]
    assert summary["failed"] == 0 and summary["errored"] == 0 and summary["passed"] == len(found)


def test_sglangs_comparator_fails_the_planted_layers_kv_b_proj(exported, sglang_root):
    if sglang_root is None:
        pytest.skip("the sglang 0.5.23 wheel is not fetched")
    done = sglang_package.run_comparator(
        exported["tp2"], exported["planted"], "--grouping-skip-keys", "rank", "--diff-threshold", "0.01"
    )
    found = comparisons(done)
    assert done.returncode != 0
    assert found["non_intrusive__model.layers.2.self_attn.kv_b_proj.output"] is False
    assert found["non_intrusive__model.layers.2.self_attn.q_b_proj.output"] is True  # upstream of the defect


def test_an_export_never_overwrites(tp2, tmp_path):
    cap = md.load_capture(tp2.capture)
    export_sglang_dump(cap, tmp_path)
    with pytest.raises(FileExistsError):
        export_sglang_dump(cap, tmp_path)


def test_a_dump_with_data_parallel_attention_is_refused_with_the_reason(tp2, exported, tmp_path):
    rewritten = tmp_path / "dp"
    rewritten.mkdir()
    for file in exported["tp2"].glob("*.pt"):
        record = torch.load(file, weights_only=True)
        record["meta"]["sglang_parallel_info"].update(attn_dp_size=2, attn_tp_rank=0, attn_tp_size=1)
        torch.save(record, rewritten / file.name)
    with pytest.raises(ValueError, match=r"data-parallel attention \(attn_dp_size 2\)"):
        md.capture.load_sglang_dump(rewritten, config=md.load_capture(tp2.capture).cfg)
