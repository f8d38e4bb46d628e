"""The documentation site builds strictly, offline, and its generated pages follow the code.

`mkdocs build --strict` fails on any warning: a link to a missing page or anchor, a page left out of the
navigation, an API name mkdocstrings cannot resolve. It runs here as `make docs` runs it, into a temporary
folder, with every proxy variable pointing at a closed local port, so a build step that tried to download
something would fail the test. The pages written from the code at build time (the CLI reference from
the argument parsers, the API reference from the package root's `__all__`, the package map from the
modules' docstrings) are then checked against the code they come from.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (the dev extra)
    import tomli as tomllib

pytest.importorskip("mkdocs", reason="mkdocs is not installed (the docs and dev extras install it; make test does)")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "mla_debug"
# Port 9 (discard) on the loopback: nothing listens, so any download fails at once.
CLOSED = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {key: value for key, value in os.environ.items() if "proxy" not in key.lower()}
    env.update(HTTP_PROXY=CLOSED, HTTPS_PROXY=CLOSED, http_proxy=CLOSED, https_proxy=CLOSED, ALL_PROXY=CLOSED)
    env["NO_MKDOCS_2_WARNING"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml")]
    done = subprocess.run([*command, "--site-dir", str(out)], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return out


def page(site: Path, name: str) -> str:
    return (site / f"{name}.html").read_text(encoding="utf-8")


def text_of(html: str) -> str:
    """The visible text of a page, whitespace collapsed (entities decoded)."""
    import html as html_lib

    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_every_page_of_the_navigation_is_built(site):
    import yaml

    def walk(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)
        else:
            for item in node:
                yield from walk(item)

    nav = list(walk(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]))
    assert {"index.md", "semantics.md", "architecture.md", "cli.md", "api.md"} <= set(nav)
    missing = [name for name in nav if not (site / name.replace(".md", ".html")).is_file()]
    assert not missing, f"pages in the navigation that were not built: {missing}"


def test_the_site_loads_nothing_from_other_hosts(site):
    """Read offline, a page needs no font, script or stylesheet from the network."""
    external = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.I)
    offenders = [p.relative_to(site).as_posix() for p in site.rglob("*.html") if external.search(p.read_text("utf-8"))]
    assert not offenders, f"pages that load resources from other hosts: {offenders}"


def test_the_cli_reference_has_every_command_and_option(site):
    import argparse

    from mla_debug.cli.main import build_parser

    text = text_of(page(site, "cli"))
    expected = []

    def walk(parser: argparse.ArgumentParser) -> None:
        expected.append(parser.prog)
        for action in parser._actions:
            expected.extend(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in dict.fromkeys(action.choices.values()):
                    walk(sub)

    walk(build_parser())
    assert len(expected) > 50
    missing = sorted({name for name in expected if name not in text})
    assert not missing, f"the CLI reference lacks: {missing}"


def test_the_api_reference_documents_the_public_surface(site):
    import mla_debug as md

    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        from api_reference import target
    finally:
        sys.path.remove(str(REPO / "docs" / "hooks"))
    html = page(site, "api")
    names = [name for name in md.__all__ if not name.startswith("__")]
    assert len(names) > 20
    # Each entry is headed by the public name (the last part of the path it is rendered from).
    assert all(target(md, name).rsplit(".", 1)[-1] == name for name in names)
    missing = [name for name in names if f'id="{target(md, name)}"' not in html]
    assert not missing, f"public names without an entry in the API reference: {missing}"


def test_the_package_map_lists_every_module_with_its_summary(site):
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    try:
        from package_map import module_summary
    finally:
        sys.path.remove(str(REPO / "docs" / "hooks"))
    text = text_of(page(site, "architecture"))
    modules = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts and p.name != "__init__.py"]
    assert len(modules) > 100
    missing = [str(p.relative_to(PACKAGE)) for p in modules if p.name not in text]
    assert not missing, f"modules missing from the package map: {missing}"
    no_summary = [str(p.relative_to(PACKAGE)) for p in modules if not module_summary(p)]
    assert not no_summary, f"modules without a docstring to summarize in the map: {no_summary}"
    # Compared without whitespace and backticks: the page wraps code spans and links in tags.
    squeezed = re.sub(r"[\s`]", "", text)
    for p in modules:
        summary = re.sub(r"[\s`]", "", module_summary(p))
        assert summary[:60] in squeezed, f"{p.relative_to(PACKAGE)}: its summary is not in the map"


def test_the_docs_extra_is_in_the_dev_extra_and_in_environment_yml():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["docs"]) <= set(extras["dev"]), "make test builds the site: the dev extra needs the docs extra"
    conda = (REPO / "environment.yml").read_text()
    for requirement in extras["docs"]:
        name = re.split(r"[\[<>=]", requirement)[0]
        assert f"- {name}" in conda, f"environment.yml does not mirror the docs extra's {name}"
