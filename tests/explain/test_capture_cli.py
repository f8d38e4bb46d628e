"""`mla-debug capture diff` and `capture explain` on the shipped sample captures (data/captures/)."""

from __future__ import annotations

import json

import pytest

from mla_debug.cli.main import main
from mla_debug.scenarios import data_folder

SAMPLES = data_folder() / "captures"


@pytest.fixture
def samples():
    if not (SAMPLES / "tp2").is_dir():
        pytest.skip(f"sample captures not found under {SAMPLES}")
    return SAMPLES


def test_diff_names_the_step_and_the_shuffled_weight(samples, capsys, tmp_path):
    out = tmp_path / "diff.json"
    assert main(["capture", "diff", str(samples / "tp2"), str(samples / "tp4-kv-b-shuffled"), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "kv_b_proj: rel_err" in printed and "DIVERGED" in printed
    assert "kv_b_proj.weight differs in layout" in printed and "shuffled (16, 16) once" in printed
    assert json.loads(out.read_text())["kind"] == "capture-diff"


def test_explain_names_the_story_and_a_clean_capture_gets_none(samples, capsys):
    assert main(["capture", "explain", str(samples / "tp4-kv-b-shuffled"), "--checkpoint", str(samples / "tp2")]) == 0
    printed = capsys.readouterr().out
    assert "relaid weight bytes read as a plain matrix" in printed and "weight-relaid-read-plain" in printed
    assert main(["capture", "explain", str(samples / "tp2")]) == 0
    assert "no layout story" in capsys.readouterr().out


def test_bad_arguments_are_one_line_errors(samples, capsys):
    assert main(["capture", "diff", str(samples / "tp2")]) == 2
    assert "give a second capture B, or --reference" in capsys.readouterr().err
