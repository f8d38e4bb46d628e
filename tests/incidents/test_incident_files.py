"""The incident files of data/incidents/: each follows the schema, cites public threads, states what the
record does not confirm, says how it is reproduced and the diagnosis it must give; no value was cut by a
YAML comment; the README's table lists exactly the files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mla_debug.incidents import IncidentFileError, incident_names, load_incident
from mla_debug.incidents.record import parse_incident

DATA = Path(__file__).resolve().parents[2] / "data" / "incidents"
FILES = sorted(DATA.glob("*.yaml")) + sorted((DATA / "scenarios").glob("*.yaml"))


def test_every_file_loads_and_every_reproduction_states_its_diagnosis():
    names = incident_names()
    assert len(names) >= 9
    for name in names:
        inc = load_incident(name)
        assert inc.name == name and inc.kinds and set(inc.expected) == set(inc.kinds)
        assert all(t.url.startswith("https://github.com/") for t in inc.threads)
        if inc.scope == "moe":
            assert inc.stand_in


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_no_value_is_cut_by_a_comment(path):
    """A plain YAML scalar ends at ' #': 'fixed by sglang #25733' would silently read 'fixed by sglang'."""
    text = path.read_text().splitlines()

    def walk(node):
        if isinstance(node, yaml.ScalarNode):
            if node.style is None and node.end_mark.line < len(text):
                rest = text[node.end_mark.line][node.end_mark.column :]
                assert not re.match(r"\s+#\S", rest), f"{path.name}:{node.end_mark.line + 1}: value cut at {rest!r}"
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(key)
                walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    walk(yaml.compose(path.read_text()))


def test_the_readme_table_lists_every_incident():
    readme = (DATA / "README.md").read_text()
    listed = set(re.findall(r"^\| \[`([\w.-]+)`\]", readme, flags=re.M))
    assert listed == set(incident_names())


def test_bad_files_are_refused_naming_the_key():
    good = yaml.safe_load((DATA / "vllm-43416.yaml").read_text())
    with pytest.raises(IncidentFileError, match="x.yaml: lacks fix"):
        parse_incident({k: v for k, v in good.items() if k != "fix"}, "x.yaml")
    with pytest.raises(IncidentFileError, match="scope 'kernel' is not one of attention, moe"):
        parse_incident({**good, "scope": "kernel"}, "x.yaml")
    with pytest.raises(IncidentFileError, match="a moe incident says in stand_in"):
        parse_incident({k: v for k, v in good.items() if k != "stand_in"}, "x.yaml")
    with pytest.raises(IncidentFileError, match="expected covers .* but reproduce runs"):
        parse_incident({**good, "expected": {}}, "x.yaml")
    with pytest.raises(IncidentFileError, match="thread ref 'vllm#1' is not owner/repo#N"):
        bad = {**good, "source": {**good["source"], "threads": [{**good["source"]["threads"][0], "ref": "vllm#1"}]}}
        parse_incident(bad, "x.yaml")
    with pytest.raises(KeyError, match="no incident named 'nope'; known: aiter-4506"):
        load_incident("nope")
