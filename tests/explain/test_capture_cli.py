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


def test_a_result_written_by_the_previous_schema_still_loads(samples, tmp_path):
    """data/captures/explanation-schema1.json: `capture explain ... --json` as schema 1 wrote it."""
    from mla_debug.explain.diff import StepVerdict
    from mla_debug.explain.explain import CaptureExplanation, Outcome
    from mla_debug.explain.stories import StoryKind
    from mla_debug.explain.truth import TruthSource
    from mla_debug.explain.untestable import Untestable

    old = CaptureExplanation.load(samples / "explanation-schema1.json")
    assert old.truth.source is TruthSource.UNRECORDED and old.diff.truth.source is TruthSource.UNRECORDED
    assert old.of("kv_b_proj").story == (StoryKind.WEIGHT_RELAID_READ_PLAIN,)
    assert old.diff.step("kv_b_proj").verdict is StepVerdict.DIVERGED
    assert old.diff.step("q_b_proj").verdict is StepVerdict.AGREES
    assert old.of("layer").untestable is Untestable.NOT_RECOMPUTED
    assert old.of("o_proj").outcome is Outcome.CORRECT_FROM_INPUTS
    again = CaptureExplanation.load(old.to_json(tmp_path / "now.json"))
    assert again == old and json.loads((tmp_path / "now.json").read_text())["schema"] == 2
