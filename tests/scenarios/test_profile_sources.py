"""Every source a shipped profile cites is real: for each setting, rule and hazard evidence of
data/engines/**/*.yaml, the cited file is in the released wheel of the cited package and version, the cited
function, class or variable name (each part of a dotted ``Class.method``) appears in it as a word, and every
cited line range lies in that function's definition or names it. Read from the wheels in place
(tests/engine_wheels.py); skipped, saying how to fetch them, when a wheel is absent."""

from __future__ import annotations

import ast
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
        for i, evidence in enumerate((data.get("reachable") or {}).get("evidence") or []):
            found.append((f"{where}: reachable evidence {i}", evidence["source"]))
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


def definition_spans(text: str, name: str) -> list[tuple[int, int]]:
    """(first, last) line of every Python definition of `name` - a def, class or assigned name; for
    ``Class.method`` the method inside the class - at any depth."""
    parts = name.split(".")
    spans: list[tuple[int, int]] = []

    def bound(node: ast.AST) -> set[str]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return {node.name}
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        return set()

    def walk(node: ast.AST, wanted: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if wanted[0] in bound(child):
                if len(wanted) == 1:
                    spans.append((child.lineno, child.end_lineno))
                else:
                    walk(child, wanted[1:])
            else:
                walk(child, wanted)

    walk(ast.parse(text), parts)
    return spans


@pytest.mark.parametrize(("where", "cited"), SOURCES, ids=[where for where, _ in SOURCES])
def test_a_cited_source_names_its_lines_and_they_say_it(where, cited):
    """Each range lies inside a definition of the cited name, or one of its lines names it as a word (an
    entry of a dict of environment variables, a C++ kernel)."""
    assert cited.get("lines"), f"{where}: cites no lines"
    require(cited["package"])
    text = source(cited["package"], cited["file"])
    lines = text.splitlines()
    spans = definition_spans(text, cited["function"]) if cited["file"].endswith(".py") else []
    last = cited["function"].split(".")[-1]
    for part in str(cited["lines"]).split(","):
        first, _, end = part.strip().partition("-")
        first, end = int(first), int(end or first)
        assert 1 <= first <= end <= len(lines), f"{where}: lines {part.strip()} are outside {cited['file']}"
        inside = any(start <= first and end <= stop for start, stop in spans)
        named = any(re.search(rf"\b{re.escape(last)}\b", line) for line in lines[first - 1 : end])
        assert inside or named, (
            f"{where}: lines {part.strip()} of {cited['file']} are not in {cited['function']} "
            f"(defined at {spans or 'no definition found'}) and do not name it"
        )
