"""The notebooks as a user meets them: parameters a runner can set without editing code, figures that
survive an HTML export, and a notebook run on a checkpoint folder given through the environment.

`make test` executes every notebook on its defaults through nbmake; these tests check what nbmake does
not: the parameters cell, the plotly setup, and the checkpoint parameter actually taking effect.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import mla_debug as md

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
# viz functions that return plotly figures: a notebook that shows one needs viz.setup_notebook() first.
PLOTLY_FIGURES = re.compile(
    r"viz\.(timeline|step_bars|error_heatmap|block_heatmap|group_error_heatmap|error_histogram|capture_heatmap)\("
)


def _code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_the_notebooks_are_there():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_is_a_parameters_cell_with_a_checkpoint(path):
    first = _code_cells(path)[0]
    assert "parameters" in first.metadata.get("tags", []), "papermill looks for the tag on the parameters cell"
    for variable in ("MLA_DEBUG_CHECKPOINT", "MLA_DEBUG_LAYER"):
        assert f'os.environ.get("{variable}"' in first.source, variable
    assert re.search(r"^checkpoint = ", first.source, flags=re.M)
    later = "\n".join(c.source for c in _code_cells(path)[1:])
    assert "Checkpoint.load(checkpoint, layer=checkpoint_layer)" in later, "the parameter must be used"


def _shows_plotly(path: Path) -> bool:
    return any(PLOTLY_FIGURES.search(c.source) for c in _code_cells(path))


# Notebook 01 draws with matplotlib only; the others show plotly figures (checked, so the list stays true).
PLOTLY_NOTEBOOKS = [p for p in NOTEBOOKS if p.name[:2] != "01"]


def test_which_notebooks_show_plotly_figures():
    assert [p.name for p in NOTEBOOKS if _shows_plotly(p)] == [p.name for p in PLOTLY_NOTEBOOKS]


@pytest.mark.parametrize("path", PLOTLY_NOTEBOOKS, ids=lambda p: p.stem)
def test_plotly_figures_come_after_the_offline_setup(path):
    cells = [c.source for c in _code_cells(path)]
    figures = [i for i, source in enumerate(cells) if PLOTLY_FIGURES.search(source)]
    setup = [i for i, source in enumerate(cells) if "viz.setup_notebook()" in source]
    assert setup and setup[0] < figures[0], f"{path.name}: viz.setup_notebook() must run before cell {figures[0]}"


def test_notebook_01_runs_on_a_checkpoint_given_through_the_environment(tmp_path, monkeypatch):
    """A saved synthetic layer 3 of tiny, handed over as MLA_DEBUG_CHECKPOINT / MLA_DEBUG_LAYER: the
    notebook must read that layer from that folder (its own cross-check against the triage runs too)."""
    nbclient = pytest.importorskip("nbclient")
    folder = md.Checkpoint.synthetic("tiny", seed=1, layer=3).save(tmp_path / "my-model")
    for name in [n for n in os.environ if n.startswith("MLA_DEBUG_")]:
        monkeypatch.delenv(name)  # the notebook's other parameters at their defaults, whatever the shell says
    monkeypatch.setenv("MLA_DEBUG_CHECKPOINT", str(folder))
    monkeypatch.setenv("MLA_DEBUG_LAYER", "3")
    monkeypatch.setenv("MLA_DEBUG_TP_SIZE", "2")  # tiny's heads split at any TP size; 2 keeps it quick

    path = next(p for p in NOTEBOOKS if p.name.startswith("01"))
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(path.parent)}}).execute()

    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Checkpoint(my-model, layer 3," in printed and f"source='{folder}'" in printed


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if "mkdtemp" in p.read_text()], ids=lambda p: p.stem)
def test_a_notebook_removes_the_temporary_folders_it_made(path, tmp_path, monkeypatch):
    """Run on its defaults with TMPDIR pointing at an empty folder (the kernel inherits it), a notebook that
    makes a temporary folder leaves nothing in it: a user's /tmp does not fill up one run at a time."""
    nbclient = pytest.importorskip("nbclient")
    for name in [n for n in os.environ if n.startswith("MLA_DEBUG_")]:
        monkeypatch.delenv(name)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(path.parent)}}).execute()
    # (torch's compile cache is not made there: tests/conftest.py gives it a folder of its own.)
    assert sorted(p.name for p in scratch.iterdir()) == []
