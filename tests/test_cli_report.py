"""`mla-debug report`: a saved triage shown and drawn again from its JSON, never overwriting, with clear
errors for a missing, broken or unknown file."""

from __future__ import annotations

import json
from functools import cache

import pytest

import mla_debug as md
from mla_debug.cli import main
from mla_debug.triage import TriageSession, triage


@cache
def _result():
    cfg = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
    return triage(scenario="vllm-pr51692", session=TriageSession(cfg, "mi355x", tokens=4), tp_sizes=(2,), progress=False)


def test_report_redraws_the_html_of_the_triage_and_prints_its_summary(tmp_path, capsys):
    result = _result()
    saved = result.to_json(tmp_path / "triage.json")
    original = md.write_html(result, tmp_path / "original.html")
    assert main(["report", str(saved), "--html", str(tmp_path / "again.html")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "again.html").read_bytes() == original.read_bytes()
    assert "diverged" in out and "culprit" in out and "absorb_uk" in out
    assert "activation patching at TP2 decode: patching absorb_uk alone" in " ".join(out.split())
    assert f"report: {tmp_path / 'again.html'}" in out

    # Never overwritten: the second time goes beside it, and the command says so.
    assert main(["report", str(saved), "--html", str(tmp_path / "again.html")]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'again.html'} exists; wrote {tmp_path / 'again-2.html'} instead" in out
    assert (tmp_path / "again-2.html").read_bytes() == original.read_bytes()


def test_report_without_html_only_prints(tmp_path, capsys):
    saved = _result().to_json(tmp_path / "triage.json")
    assert main(["report", str(saved)]) == 0
    assert "tiny-kv512 on mi355x under vllm-pr51692" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["triage.json"]


def test_report_of_an_older_file_says_what_it_lacks(tmp_path, capsys):
    data = _result().to_dict()
    data["schema"] = 2
    for run in data["runs"]:
        run["kernels"] = {}
        for step in run["steps"]:
            step.update(selection=None, scale_layout=None, weight_layout=None, violation_details=step.pop("violations"))
    del data["block_errors"], data["patching"]  # schema 2 kept neither
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert main(["report", str(old), "--html", str(tmp_path / "old.html")]) == 0
    text = (tmp_path / "old.html").read_text(encoding="utf-8")
    assert "No block heatmap: " in text and "schema 2 file, which keeps none" in text
    assert "not recorded: this report was read from a schema 2 file" in text
    printed = " ".join(capsys.readouterr().out.split())
    assert "activation patching at TP2 decode: not recorded: this report was read from a schema 2 file" in printed


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "missing.json: no such file"),
        ("{oops", "not valid JSON"),
        ('{"model": "m"}', "not a triage report"),
        (
            '{"schema": 7, "model": "m", "runs": []}',
            "schema 7 is not one this version of mla_debug reads (schemas 1, 2, 3, 4, 5, 6)",
        ),
    ],
    ids=["missing", "not-json", "not-a-report", "unknown-schema"],
)
def test_report_errors_name_the_file_and_the_problem(tmp_path, capsys, content, message):
    path = tmp_path / "missing.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", str(path), "--html", str(tmp_path / "out.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mla-debug report: error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.html").exists()


def test_report_checks_the_html_name_before_reading(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing.json"), "--html", str(tmp_path / "out.htm")]) == 2
    err = capsys.readouterr().err
    assert "--html" in err and "must be a .html file" in err and "no such file" not in err
