"""Every place the code cites the docs resolves: "docs/semantics.md §N" names a numbered section that the
page has, and every "docs/<page>.md" is a page of the site (mkdocs.yml's nav).

Sections are cited by number so that a reader of the code can find the rule a line implements; a
renumbered or deleted section would leave those pointers dangling, so they are checked here, in every
text file of the package, the tests, the benchmarks and the notebooks, and in the README.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SCANNED = ("mla_debug", "tests", "benchmarks", "notebooks")
SUFFIXES = {".py", ".md", ".ipynb", ".sh", ".yaml", ".yml", ".toml", ".txt"}

# A page, then any sections: "docs/semantics.md §3", "§2-3", "§2, §3 and §11".
CITATION = re.compile(r"docs/([\w/-]+\.md)((?:(?:\s*,\s*|\s+and\s+|\s*)§\d+(?:-\d+)?)*)")
# What the code cited before the docs were in the repo.
OLD = re.compile(r"\bSEMANTICS\s+(?:\d|notation)|\bDESIGN\.md\b")
# A numbered section: "## 3. Title { #s3 }".
SECTION = re.compile(r"^#{2,3} (\d+)\. .*\{ #s\1 \}\s*$", re.M)


def nav_pages() -> set[str]:
    """Every page of the site's navigation (generated ones included)."""

    def walk(node) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [page for value in node.values() for page in walk(value)]
        return [page for item in node for page in walk(item)]

    # The config's !!python tags (none today) would stop safe_load; mkdocs.yml has plain YAML only.
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    return set(walk(config["nav"]))


def sections(page: str) -> set[int]:
    path = DOCS / page
    return {int(n) for n in SECTION.findall(path.read_text(encoding="utf-8"))} if path.is_file() else set()


def cited_sections(text: str) -> list[int]:
    numbers = []
    for start, end in re.findall(r"§(\d+)(?:-(\d+))?", text):
        numbers += list(range(int(start), int(end or start) + 1))
    return numbers


def problems_in(text: str, pages: set[str]) -> list[str]:
    """What in `text` does not resolve, one line each."""
    out = [f"{m.group(0)!r}: cites a document that is not in the repo (docs/ replaced it)" for m in OLD.finditer(text)]
    for match in CITATION.finditer(text):
        page, cited = match.group(1), cited_sections(match.group(2))
        if page not in pages:
            out.append(f"{match.group(0)!r}: docs/{page} is not a page of the site (mkdocs.yml nav)")
            continue
        missing = sorted(set(cited) - sections(page))
        if missing:
            out.append(f"{match.group(0)!r}: docs/{page} has no section {', '.join(f'§{n}' for n in missing)}")
    return out


def scanned_files() -> list[Path]:
    files = [REPO / "README.md"]
    for folder in SCANNED:
        files += [p for p in sorted((REPO / folder).rglob("*")) if p.suffix in SUFFIXES and p.is_file()]
    return [p for p in files if "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts]


def test_semantics_sections_are_numbered_in_order():
    numbers = [int(n) for n in SECTION.findall((DOCS / "semantics.md").read_text(encoding="utf-8"))]
    assert numbers == list(range(1, len(numbers) + 1)), f"docs/semantics.md sections out of order: {numbers}"
    assert len(numbers) >= 10


def test_every_docs_citation_in_the_code_resolves():
    pages = nav_pages()
    found, problems = 0, []
    for path in scanned_files():
        if path == Path(__file__):
            continue  # its examples of bad citations are on purpose
        text = path.read_text(encoding="utf-8", errors="replace")
        found += len(CITATION.findall(text))
        problems += [f"{path.relative_to(REPO)}: {problem}" for problem in problems_in(text, pages)]
    assert not problems, "citations that do not resolve:\n" + "\n".join(problems)
    assert found > 0, "no docs/... citation found: the scan looked in the wrong place"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("as in docs/semantics.md §5", 0),
        ("docs/semantics.md §2, §3 and §11", 0),
        ("docs/semantics.md §2-3", 0),
        ("docs/semantics.md §99", 1),
        ("docs/semantics.md §2-99", 1),
        ("docs/no-such-page.md", 1),
        ("see SEMANTICS 3", 1),
        ("the layering of DESIGN.md", 1),
    ],
)
def test_the_checker_tells_a_dangling_citation(text, expected):
    assert len(problems_in(text, nav_pages())) == expected, problems_in(text, nav_pages())
