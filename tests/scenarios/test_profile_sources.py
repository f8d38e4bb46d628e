"""Every source a shipped profile cites is real: for each setting and rule of data/engines/**/*.yaml, the
cited file is in the released wheel of the cited package and version, and the cited function, class or
variable name (each part of a dotted ``Class.method``) appears in it as a word. Read from the wheels in
place (tests/engine_wheels.py); skipped, saying how to fetch them, when a wheel is absent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from engine_wheels import RELEASES, has_file, require, source

ENGINES = Path(__file__).resolve().parents[2] / "data" / "engines"


def cited_sources() -> list[tuple[str, dict]]:
    """(file: setting/rule, source) for every source in data/engines/**/*.yaml, in file order."""
    found = []
    for path in sorted(ENGINES.rglob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        where = path.relative_to(ENGINES)
        for name, entry in (data.get("settings") or {}).items():
            if isinstance(entry, dict) and "source" in entry:
                found.append((f"{where}: setting {name}", entry["source"]))
        for rule in data.get("rules") or []:
            if "source" in rule:
                found.append((f"{where}: rule {rule['id']}", rule["source"]))
    return found


SOURCES = cited_sources()


def test_every_setting_and_rule_of_the_release_profiles_is_cited():
    for name in ("vllm-0.33", "sglang-0.5.23"):
        data = yaml.safe_load((ENGINES / f"{name}.yaml").read_text())
        cited = {where for where, _ in SOURCES if where.startswith(f"{name}.yaml: ")}
        wanted = {f"{name}.yaml: setting {s}" for s in data["settings"]} | {
            f"{name}.yaml: rule {r['id']}" for r in data["rules"]
        }
        assert cited == wanted


@pytest.mark.parametrize(("where", "cited"), SOURCES, ids=[where for where, _ in SOURCES])
def test_a_cited_source_names_a_file_of_the_release_and_a_name_in_it(where, cited):
    package, version = cited["package"], cited["version"]
    assert package in RELEASES, f"{where}: {package} is not a package whose release the tests read"
    assert version == RELEASES[package], f"{where}: cites {package} {version}; the profiles model {RELEASES[package]}"
    require(package)
    assert has_file(package, cited["file"]), f"{where}: {package} {version} has no file {cited['file']}"
    text = source(package, cited["file"])
    for part in cited["function"].split("."):
        assert re.search(rf"\b{re.escape(part)}\b", text), f"{where}: {cited['file']} never names {part}"
