"""The shipped sample captures (data/captures/) are what their script writes: regenerated here into a
temporary folder and compared file by file.

What the script copies is compared byte for byte: the weights (seeded, then at most re-laid out) and the
layer's input. What it computes - every op's input and output after the first - depends on the order in
which this CPU's kernels sum (AVX-512 and AMX GEMMs differ from AVX2 ones in the last bit), so those are
compared within a norm bound: relative L2 at most 2^-8, one bf16 unit in the last place over the whole
tensor, far below what a layout bug does (a re-laid weight read plainly gives about 1). Manifests are
compared field by field except the versions of the libraries that wrote them (an environment fact).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import mla_debug as md
from mla_debug.capture.store import read_rank

pytest.importorskip("transformers")

FOLDER = Path(__file__).resolve().parents[2] / "data" / "captures"
# Fields of a manifest that name the environment that wrote it.
ENVIRONMENT = ("versions", "engine")
COPIED_ROLES = {"weight", "weight_scale"}
COPIED_NAMES = {"layer.input", "positions"}
BOUND = 2.0**-8


def _script():
    spec = importlib.util.spec_from_file_location("make_samples", FOLDER / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _content(manifest: Path) -> dict:
    data = json.loads(manifest.read_text())
    return {key: value for key, value in data.items() if key not in ENVIRONMENT}


def _same_tensors(made: Path, shipped: Path) -> None:
    """Two rank folders' tensors, read with their recorded dtypes and layouts."""
    ours, theirs = read_rank(made)[1].tensors, read_rank(shipped)[1].tensors
    assert sorted(ours) == sorted(theirs), f"{shipped}: other tensor names"
    for name, expected in theirs.items():
        actual, where = ours[name].tensor, f"{shipped.parent.name}/{shipped.name}/{name}"
        layout = (expected.tensor.dtype, expected.tensor.shape, expected.tensor.stride())
        assert (actual.dtype, actual.shape, actual.stride()) == layout, where
        if expected.role.value in COPIED_ROLES or name in COPIED_NAMES:
            assert torch.equal(actual.view(torch.uint8), expected.tensor.view(torch.uint8)), f"{where}: bytes differ"
        else:
            error = md.numerics.rel_l2(actual, expected.tensor)
            assert error <= BOUND, f"{where}: rel L2 {error:.2e} above {BOUND:.2e} (regenerate data/captures?)"


def test_the_samples_are_what_make_samples_writes(tmp_path):
    _script().main(["--out", str(tmp_path)])
    shipped = sorted(p.relative_to(FOLDER) for p in FOLDER.rglob("*") if p.is_file() and p.parent != FOLDER)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert shipped == made, "the script writes other files than data/captures holds"
    for relative in made:
        if relative.name == "manifest.json":
            assert _content(tmp_path / relative) == _content(FOLDER / relative), f"{relative} differs"
            _same_tensors(tmp_path / relative.parent, FOLDER / relative.parent)


def test_the_bound_tells_a_relayout_from_rounding():
    """The bound is not vacuous: the TP4 sample's kv_b_proj output, computed from shuffled bytes, is far
    outside it against what the clean weight's rows give."""
    clean = read_rank(FOLDER / "tp2" / "rank0-of-2")[1].tensors
    shuffled = read_rank(FOLDER / "tp4-kv-b-shuffled" / "rank0-of-4")[1].tensors
    rows = shuffled["kv_b_proj.weight"].tensor.shape[0]  # TP4 rank 0's heads are TP2 rank 0's first ones
    expected = shuffled["kv_b_proj.input"].tensor.float() @ clean["kv_b_proj.weight"].tensor[:rows].float().t()
    assert md.numerics.rel_l2(shuffled["kv_b_proj.output"].tensor.float(), expected) > 100 * BOUND
