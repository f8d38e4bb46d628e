"""load_capture's checks, each with the error it gives, and the gathering rules on hand-made ranks."""

from __future__ import annotations

import json

import pytest
import torch

import mla_debug as md
from mla_debug.capture import CapturedTensor, CaptureManifest, EngineInfo, RankCapture, RankDisagreement, Shard
from mla_debug.capture import TensorRole as R
from mla_debug.capture.store import write_rank
from mla_debug.model import MLAConfig

CFG = MLAConfig.preset("tiny")


def manifest(tp_size: int, positions=(3, 4), **changes) -> CaptureManifest:
    fields = dict(engine=EngineInfo("test", "1"), cfg=CFG, layer=2, tp_size=tp_size, positions=positions, tokens=(0, 1))
    fields.update(changes)
    return CaptureManifest(**fields)


def rank_tensors(rank: int, tp_size: int) -> dict[str, CapturedTensor]:
    """A column-split output, a row-parallel partial sum, a replicated weight and a per-rank scale."""
    split = torch.full((2, 3), float(rank))
    return {
        "q_b_proj.output": CapturedTensor("q_b_proj.output", R.OUTPUT, split, "q_b_proj", shard=Shard.SPLIT, shard_dim=-1),
        "o_proj.output": CapturedTensor("o_proj.output", R.OUTPUT, torch.full((2, 4), rank + 1.0), "o_proj", shard=Shard.PARTIAL_SUM),
        "q_a_proj.weight": CapturedTensor("q_a_proj.weight", R.WEIGHT, torch.arange(6.0).view(2, 3).t()),
        "W_UK.scale": CapturedTensor("W_UK.scale", R.DERIVED_WEIGHT, torch.tensor(rank + 0.5), shard=Shard.PER_RANK),
    }


def write_capture(out, tp_size: int, ranks=None, **manifest_changes):
    for r in range(tp_size) if ranks is None else ranks:
        write_rank(out, manifest(tp_size, **manifest_changes), RankCapture(r, tp_size, rank_tensors(r, tp_size)))
    return out


def test_gathering_follows_each_tensors_shard_rule(tmp_path):
    cap = md.load_capture(write_capture(tmp_path / "c", 3))
    assert cap.tp_size == 3 and cap.manifest.layer == 2 and cap.positions.tolist() == [3, 4]
    assert torch.equal(cap.gathered("q_b_proj.output"), torch.tensor([[0.0] * 3 + [1.0] * 3 + [2.0] * 3] * 2))
    assert torch.equal(cap.gathered("o_proj.output"), torch.full((2, 4), 6.0))
    weight = cap.gathered("q_a_proj.weight")
    assert weight.stride() == (1, 3)  # the stored (transposed) layout comes back
    with pytest.raises(ValueError, match=r"W_UK.scale: each rank holds its own value.*capture.rank\(r\)"):
        cap.gathered("W_UK.scale")
    assert float(cap.rank(2)["W_UK.scale"].tensor) == 2.5
    assert cap.names(R.OUTPUT) == ["q_b_proj.output", "o_proj.output"]
    with pytest.raises(KeyError, match="has no rank 5"):
        cap.rank(5)


def test_a_missing_rank_is_named(tmp_path):
    out = write_capture(tmp_path / "c", 4, ranks=[0, 1, 3])
    with pytest.raises(FileNotFoundError, match=r"tp_size 4 capture but lacks rank\(s\) \[2\].*rank2-of-4"):
        md.load_capture(out)


def test_mixed_tp_sizes_are_refused(tmp_path):
    out = write_capture(tmp_path / "c", 2)
    write_rank(out, manifest(1), RankCapture(0, 1, rank_tensors(0, 1)))
    with pytest.raises(ValueError, match=r"mixes captures of tp_size \[1, 2\]"):
        md.load_capture(out)


def test_ranks_whose_manifests_differ_are_refused_naming_the_field(tmp_path):
    out = tmp_path / "c"
    write_rank(out, manifest(2), RankCapture(0, 2, rank_tensors(0, 2)))
    write_rank(out, manifest(2, positions=(3, 5)), RankCapture(1, 2, rank_tensors(1, 2)))
    with pytest.raises(ValueError, match=r"rank1-of-2's manifest differs from rank0-of-2's in \['positions'\]"):
        md.load_capture(out)


def test_ranks_holding_different_tensors_are_refused(tmp_path):
    out = tmp_path / "c"
    write_rank(out, manifest(2), RankCapture(0, 2, rank_tensors(0, 2)))
    fewer = rank_tensors(1, 2)
    del fewer["o_proj.output"]
    write_rank(out, manifest(2), RankCapture(1, 2, fewer))
    with pytest.raises(ValueError, match=r"hold different tensors.*only in rank0-of-2: \['o_proj.output'\]"):
        md.load_capture(out)


def test_replicated_tensors_that_disagree_raise_rank_disagreement(tmp_path):
    out = tmp_path / "c"
    write_rank(out, manifest(2), RankCapture(0, 2, rank_tensors(0, 2)))
    other = rank_tensors(1, 2)
    changed = other["q_a_proj.weight"].tensor.clone()
    changed[1, 0] += 0.25
    other["q_a_proj.weight"] = CapturedTensor("q_a_proj.weight", R.WEIGHT, changed)
    write_rank(out, manifest(2), RankCapture(1, 2, other))
    with pytest.raises(RankDisagreement, match=r"q_a_proj.weight: rank 0 and rank 1 .* \(max \|diff\| 0.25\)") as err:
        md.load_capture(out)
    assert (err.value.name, err.value.ranks, err.value.max_diff) == ("q_a_proj.weight", (0, 1), 0.25)
    cap = md.load_capture(out, check=False)  # still readable for inspection
    with pytest.raises(RankDisagreement):
        cap.gathered("q_a_proj.weight")


def test_corrupt_files_are_named(tmp_path):
    out = write_capture(tmp_path / "c", 1)
    folder = out / "rank0-of-1"
    (folder / "tensors.safetensors").write_bytes(b"\x00\x01not safetensors")
    with pytest.raises(ValueError, match=r"tensors.safetensors: not a readable safetensors file"):
        md.load_capture(out)
    out2 = write_capture(tmp_path / "d", 1)
    (out2 / "rank0-of-1" / "manifest.json").write_text("{ truncated")
    with pytest.raises(ValueError, match=r"manifest.json: not valid JSON"):
        md.load_capture(out2)


def test_a_manifest_that_does_not_match_its_bytes_is_named(tmp_path):
    out = write_capture(tmp_path / "c", 1)
    path = out / "rank0-of-1" / "manifest.json"
    data = json.loads(path.read_text())
    data["tensors"]["q_b_proj.output"]["layout"]["shape"] = [3, 3]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"\[q_b_proj.output\]: 24 stored bytes, but dtype float32 shape \(3, 3\)"):
        md.load_capture(out)
    data["format_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="capture format version 99"):
        md.load_capture(out)


def test_not_a_capture(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        md.load_capture(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no rank<r>-of-<T> folders"):
        md.load_capture(tmp_path / "empty")


def test_a_rank_folder_is_never_overwritten(tmp_path):
    out = write_capture(tmp_path / "c", 1)
    before = (out / "rank0-of-1" / "tensors.safetensors").read_bytes()
    with pytest.raises(FileExistsError, match="rank0-of-1 already exists"):
        write_rank(out, manifest(1), RankCapture(0, 1, rank_tensors(0, 1)))
    assert (out / "rank0-of-1" / "tensors.safetensors").read_bytes() == before


def test_one_rank_folder_of_a_tp1_capture_loads_alone(tmp_path):
    out = write_capture(tmp_path / "c", 1)
    assert md.load_capture(out / "rank0-of-1").tp_size == 1
