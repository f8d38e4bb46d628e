"""The shipped sample captures (data/captures/) are what their script writes: regenerated here into a
temporary folder and compared file by file - the tensors byte for byte, the manifests field by field
except the versions of the libraries that wrote them (an environment fact, not the sample's content)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

FOLDER = Path(__file__).resolve().parents[2] / "data" / "captures"
# Fields of a manifest that name the environment that wrote it.
ENVIRONMENT = ("versions", "engine")


def _script():
    spec = importlib.util.spec_from_file_location("make_samples", FOLDER / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _content(manifest: Path) -> dict:
    data = json.loads(manifest.read_text())
    return {key: value for key, value in data.items() if key not in ENVIRONMENT}


def test_the_samples_are_what_make_samples_writes(tmp_path):
    _script().main(["--out", str(tmp_path)])
    shipped = sorted(p.relative_to(FOLDER) for p in FOLDER.rglob("*") if p.is_file() and p.parent != FOLDER)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert shipped == made, "the script writes other files than data/captures holds"
    for relative in made:
        if relative.name == "manifest.json":
            assert _content(tmp_path / relative) == _content(FOLDER / relative), f"{relative} differs"
        else:
            same = (tmp_path / relative).read_bytes() == (FOLDER / relative).read_bytes()
            assert same, f"{relative} differs: regenerate data/captures with data/captures/make_samples.py"
