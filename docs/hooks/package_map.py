"""The package map and the layer diagram of the architecture page, written from the code itself.

The map lists every subpackage and module of `mla_debug/` with the summary of its docstring (its first
sentence); the layer diagram is the `LAYERS` list that tests/test_layering.py enforces. Both are read
with `ast`, so nothing is imported or executed and the page follows the code at every build.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from markdown_text import markdown_text


def summary(docstring: str | None) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    if not docstring:
        return ""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    # A sentence ends at '.', '!' or '?' followed by a space and a capital or a backtick.
    match = re.search(r"[.!?](?=\s+[A-Z`])", paragraph)
    return paragraph[: match.end()] if match else paragraph


def module_summary(path: Path) -> str:
    return summary(ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))))


def layers(contract: Path) -> list[list[str]]:
    """The layers of the import contract, highest first (each a sorted list of sibling names); [] when the
    contract file has no literal `LAYERS = [...]`."""
    if not contract.is_file():
        return []
    for node in ast.parse(contract.read_text(encoding="utf-8")).body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == "LAYERS" and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return []
            return [sorted(layer) for layer in value]
    return []


def layer_table(contract: Path, package: Path) -> str:
    """The layers as a table, highest first, one row per package: each imports only the layers below it
    and none of its siblings."""
    present = [[name for name in layer if _exists(package, name)] for layer in layers(contract)]
    present = [layer for layer in present if layer]
    if not present:
        raise ValueError(f"{contract}: no literal LAYERS list to draw the layers from")
    lines = ["| layer | package | what it is |", "|---|---|---|"]
    for number, layer in enumerate(present):
        level = len(present) - number
        # Siblings share the layer number, which is written once.
        for i, name in enumerate(layer):
            lines.append(f"| {level if i == 0 else ''} | `{name}` | {_cell(_summary_of(package, name))} |")
    return "\n".join(lines)


def _summary_of(package: Path, name: str) -> str:
    folder = package / name
    return module_summary(folder / "__init__.py" if folder.is_dir() else package / f"{name}.py")


def _exists(package: Path, name: str) -> bool:
    return (package / name / "__init__.py").is_file() or (package / f"{name}.py").is_file()


def _cell(text: str) -> str:
    """Docstring text inside a table cell, rendered as written. (The site hook links semantics citations
    in the HTML.)"""
    return markdown_text(text)


def _rows(folder: Path, package: Path) -> list[tuple[str, str]]:
    """(path relative to `folder`, summary) for the modules of `folder` and, recursively, of its
    subpackages (a subpackage's own row first)."""
    rows = []
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix == ".py" and path.name != "__init__.py":
            rows.append((path.relative_to(folder).as_posix(), module_summary(path)))
    for sub in sorted(p for p in folder.iterdir() if (p / "__init__.py").is_file()):
        rows.append((sub.relative_to(folder).as_posix() + "/", module_summary(sub / "__init__.py")))
        rows += [(f"{sub.name}/{name}", text) for name, text in _rows(sub, package)]
    return rows


def package_map(package: Path, contract: Path) -> str:
    """Markdown: one section per top-level subpackage (in layer order, highest first, then any the
    contract does not place), then the root's own modules."""
    order = [name for layer in layers(contract) for name in layer]
    subpackages = sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file())
    ordered = [name for name in order if name in subpackages] + [name for name in subpackages if name not in order]
    lines = []
    for name in ordered:
        folder = package / name
        lines += [f"### `{package.name}/{name}/`", "", _cell(module_summary(folder / "__init__.py")), ""]
        rows = _rows(folder, package)
        if rows:
            lines += ["| module | what it is |", "|---|---|"]
            lines += [f"| `{path}` | {_cell(text)} |" for path, text in rows]
            lines.append("")
    top = [(p.name, module_summary(p)) for p in sorted(package.glob("*.py"))]
    lines += [f"### `{package.name}/` itself", "", "| module | what it is |", "|---|---|"]
    lines += [f"| `{name}` | {_cell(text)} |" for name, text in top]
    return "\n".join(lines) + "\n"
