"""The layering of docs/architecture.md, enforced: each layer imports only the layers below it
(function-level, lazy imports count too), siblings in one layer do not import each other, and the heavy
optional libraries stay out of module-level imports below viz so `import mla_debug` works on a bare GPU
box.

    real_aiter <- numerics, implementations <- layouts <- gpu <- kernels, normquant <- model <- scenarios
    <- parallel <- capture <- verdict <- triage, explain, profiling <- incidents <- viz <- cli

`implementations` (the implementation-choice mechanism the kernels and the norm+quant backends share)
imports nothing of the package, so it sits at the bottom beside numerics.

gpu/ (everything that imports triton) is reached only through the kernels and norm+quant backends that
launch it (`GPU_LAUNCHERS`), and no package has an import circle inside it: a module that its own
imports lead back to cannot be read, tested or moved alone. real_aiter/ (the loader of AMD's own aiter code) imports nothing of the library, so it sits at
the bottom: the tuned tables, gpu/'s launches of aiter's Triton kernels and the tests build on it. The
package's private helpers (`_callable_package`, `_checks`, `_files`, `_json_numbers`, `_json_records`, `_memory`, `_rank_exit`, `_progress`, `_stdio`, `_str_enum`,
`_version`) sit under everything, and the package root (`mla_debug/__init__.py`, the public surface) over everything;
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
PRIVATE = {"_callable_package", "_checks", "_files", "_json_numbers", "_json_records", "_memory", "_rank_exit", "_progress", "_stdio", "_str_enum", "_version"}
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
    assert top <= placed, f"not in any layer (add it to LAYERS; docs/architecture.md draws its layers from it): {sorted(top - placed)}"


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


# The modules that launch gpu/'s kernels: the Triton GEMM kernels and the Triton norm + quant backends.
GPU_LAUNCHERS = {
    "mla_debug.kernels.aiter_triton",
    "mla_debug.kernels.triton_kernels",
    "mla_debug.normquant.aiter_triton_backend",
    "mla_debug.normquant.triton_fused",
    "mla_debug.normquant.triton_unfused",
}


def test_only_the_launchers_reach_gpu(graph):
    gpu = {m for m in graph.modules if m == "mla_debug.gpu" or m.startswith("mla_debug.gpu.")}
    importers = set().union(*(graph.find_modules_that_directly_import(m) for m in gpu)) - gpu
    assert importers <= GPU_LAUNCHERS, f"gpu/ reached from outside its launchers: {sorted(importers - GPU_LAUNCHERS)}"


def _circles(modules: list[str], imports) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(imports[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(imports[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_circle_inside_a_package():
    """Lazy imports count; imports only for type annotations (under TYPE_CHECKING) do not run."""
    graph = grimp.build_graph("mla_debug", exclude_type_checking_imports=True)
    circles = []
    for package in sorted({m.split(".")[1] for m in graph.modules if m.count(".") >= 1}):
        prefix = f"mla_debug.{package}"
        inside = sorted(m for m in graph.modules if m == prefix or m.startswith(prefix + "."))
        imports = {m: sorted(t for t in graph.find_modules_directly_imported_by(m) if t in inside) for m in inside}
        circles += _circles(inside, imports)
    assert not circles, "import circles inside a package:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_circles():
    imports = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"], "e": []}
    assert _circles(list(imports), imports) == [["a", "b", "c"]]
