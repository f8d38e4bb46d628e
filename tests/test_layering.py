"""The layering of DESIGN.md, enforced: each layer imports only the layers below it (function-level,
lazy imports count too), siblings in one layer do not import each other, and the heavy optional
libraries stay out of module-level imports below viz so `import mla_debug` works on a bare GPU box.

    real_aiter <- numerics, implementations <- layouts <- gpu <- kernels, normquant <- model <- scenarios
    <- parallel <- capture <- verdict <- triage, explain, profiling <- incidents <- viz <- cli

`implementations` (the implementation-choice mechanism the kernels and the norm+quant backends share)
imports nothing of the package, so it sits at the bottom beside numerics.

gpu/ (everything that imports triton) is reached only through the kernels and norm+quant backends that
launch it. real_aiter/ (the loader of AMD's own aiter code) imports nothing of the library, so it sits at
the bottom: the tuned tables, gpu/'s launches of aiter's Triton kernels and the tests build on it. The
package's private helpers (`_callable_package`, `_checks`, `_files`, `_json_numbers`, `_progress`, `_stdio`,
`_version`) sit
under everything, and the package root (`mla_debug/__init__.py`, the public surface) over everything;
neither is a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mla_debug"

# Highest first; a set is one layer of independent siblings. Folders not created yet are left out by
# `present`, so the contract names where each belongs before it exists.
LAYERS: list[set[str]] = [
    {"cli"},
    {"viz"},
    {"incidents"},
    {"triage", "explain", "profiling"},
    # The noise floor and the divergence rule that triage and the capture explanation share.
    {"verdict"},
    # The explanation reads captures, so capture sits below it.
    {"capture"},
    {"parallel"},
    {"scenarios"},
    {"model"},
    {"kernels", "normquant"},
    {"gpu"},
    {"layouts"},
    {"numerics", "implementations"},
    {"real_aiter"},
]
PRIVATE = {"_callable_package", "_checks", "_files", "_json_numbers", "_progress", "_stdio", "_version"}
# Imported only inside functions below viz (so a CPU-only or headless install imports the package).
HEAVY = ("pandas", "plotly", "matplotlib", "triton")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("mla_debug")


def present(graph: grimp.ImportGraph) -> list[grimp.Layer]:
    layers = []
    for layer in LAYERS:
        names = sorted(name for name in layer if f"mla_debug.{name}" in graph.modules)
        if names:
            layers.append(grimp.Layer(*names, independent=True))
    return layers


def describe(dependency) -> str:
    """'a imports b:' and one line per route (first importing module -> ... -> first imported module)."""
    routes = [" -> ".join([min(r.heads), *r.middle, min(r.tails)]) for r in dependency.routes]
    return f"{dependency.importer} imports {dependency.imported}:\n    " + "\n    ".join(sorted(routes))


def test_every_subpackage_has_a_place(graph):
    placed = set().union(*LAYERS) | PRIVATE
    top = {module.split(".")[1] for module in graph.modules if module.count(".") >= 1}
    assert top <= placed, f"not in any layer of DESIGN.md (add it to LAYERS and the doc): {sorted(top - placed)}"


def test_layers_import_only_downward(graph):
    illegal = graph.find_illegal_dependencies_for_layers(layers=present(graph), containers={"mla_debug"})
    assert not illegal, "imports against the layering:\n" + "\n".join(sorted(map(describe, illegal)))


def test_private_helpers_import_no_layer(graph):
    offenders = [
        f"mla_debug.{helper} imports {imported}"
        for helper in PRIVATE
        if f"mla_debug.{helper}" in graph.modules
        for imported in graph.find_modules_directly_imported_by(f"mla_debug.{helper}")
        if imported.startswith("mla_debug.") and imported.split(".")[1] not in PRIVATE
    ]
    assert not offenders, "\n".join(offenders)


def module_level_imports(path: Path) -> list[tuple[str, int]]:
    """Top-level module names imported outside any function or class body (the import-time cost)."""
    found = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def allowed_at_module_level(folder: str) -> set[str]:
    """viz and cli draw; gpu's kernel sources need triton to be defined at all (gpu/ is imported lazily)."""
    return {"viz": {"pandas", "plotly", "matplotlib"}, "cli": {"pandas", "plotly", "matplotlib"}}.get(
        folder, {"triton"} if folder == "gpu" else set()
    )


def test_heavy_libraries_are_imported_lazily_below_viz():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {name} at module level"
        for path in PACKAGE.rglob("*.py")
        for name, line in module_level_imports(path)
        if name in HEAVY and name not in allowed_at_module_level(path.relative_to(PACKAGE).parts[0])
    ]
    assert not offenders, "\n".join(offenders)


def test_no_module_reaches_back_through_the_package_root(graph):
    # The root imports every layer, so a module importing it would depend on all of them at once.
    importers = sorted(graph.find_modules_that_directly_import("mla_debug"))
    assert not importers, "import from the layer that owns the name instead: " + ", ".join(importers)
