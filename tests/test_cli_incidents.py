"""`mla-debug incidents` lists the shipped incidents; `incidents run NAME` prints the diagnosis beside the
thread's, writes it as JSON on request, and exits 1 when the file's expectation does not hold."""

from __future__ import annotations

import json

import yaml

from mla_debug.cli.main import main
from mla_debug.incidents import incident_names, incidents_folder


def test_incidents_lists_every_file(capsys):
    assert main(["incidents"]) == 0
    out = capsys.readouterr().out
    for name in incident_names():
        assert name in out


def test_run_prints_both_sides_and_writes_json(capsys, tmp_path):
    target = tmp_path / "diag.json"
    assert main(["incidents", "run", "vllm-43416", "--json", str(target)]) == 0
    out = capsys.readouterr().out
    assert "what the thread reported:" in out and "what mla_debug finds by running it:" in out
    assert "experts.w13: explained by scale-codes-read-as-values" in out
    assert "reproduced: every expected field holds" in out
    data = json.loads(target.read_text())
    assert data["ok"] is True and data["operands"]["stories"] == ["scale-codes-read-as-values"]


def test_a_failed_expectation_exits_1(capsys, tmp_path):
    data = yaml.safe_load((incidents_folder() / "vllm-43416.yaml").read_text())
    data["expected"]["operands"]["stories"] = ["grouped-scale-token-major-read-group-major"]
    path = tmp_path / "vllm-43416.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["incidents", "run", str(path)]) == 1
    assert "NOT reproduced: 1 field(s) differ" in capsys.readouterr().out


def test_an_unknown_incident_is_one_line(capsys):
    assert main(["incidents", "run", "no-such"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mla-debug incidents run: error:") and "no incident named 'no-such'" in err
