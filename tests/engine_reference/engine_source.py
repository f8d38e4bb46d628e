"""Load single functions from the released engine wheels, as written, without importing the engines.

Neither vLLM nor SGLang imports here (each needs its compiled extension and a CUDA or ROCm torch), and a
quantizer's file pulls in half of its engine at import time. So a test takes one file out of the wheel
(`engine_wheels.extract`), parses it, and executes only the top-level statements that define the names it
asks for - function and class definitions, module constants, the ``if`` that sets them - in a namespace
holding what those statements use: real modules (torch, triton, typing) wherever they are imported, and a
stub only for what is unavoidable (which GPU the process runs on). Each test says what it stubs and why.

The code is compiled with the extracted file's path and line numbers, so Triton's ``@triton.jit`` reads the
kernel's source from that file as it would in the engine, and tracebacks point into the engine's file.
"""

from __future__ import annotations

import ast
import atexit
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from types import FunctionType

import engine_wheels


@cache
def _extract_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="mla-debug-engine-source-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@cache
def _parsed(package: str, member: str) -> tuple[Path, ast.Module]:
    """The file taken out of the wheel (its path on disk) and its syntax tree."""
    engine_wheels.require(package)
    dest = _extract_root() / package
    engine_wheels.extract(package, [member], dest)
    path = dest / member
    return path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds (definitions, assignment targets, and those inside an ``if``)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.If):
        return {name for child in [*node.body, *node.orelse] for name in _bound_names(child)}
    return set()


def _run(path: Path, statements: list[ast.stmt], namespace: dict) -> None:
    module = ast.Module(body=statements, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 - the engine's own code, by design


def load(package: str, member: str, names: Iterable[str], given: Mapping[str, object]) -> dict:
    """Execute the top-level statements of `member` that bind any of `names`, in file order, in a namespace
    starting as `given`; returns the namespace. A name no statement binds is an error naming the file."""
    path, tree = _parsed(package, member)
    wanted = set(names)
    chosen = [node for node in tree.body if _bound_names(node) & wanted]
    missing = wanted - {name for node in chosen for name in _bound_names(node)}
    if missing:
        raise LookupError(f"{package} {engine_wheels.RELEASES[package]} {member} defines no {sorted(missing)}")
    namespace = dict(given)
    _run(path, chosen, namespace)
    return namespace


def load_file(package: str, member: str) -> dict:
    """Execute a whole file whose imports are all available here (torch, typing, triton); its namespace."""
    path, tree = _parsed(package, member)
    namespace: dict = {"__name__": f"engine_reference.{package}.{Path(member).stem}"}
    _run(path, list(tree.body), namespace)
    return namespace


def load_methods(
    package: str, member: str, class_name: str, methods: Iterable[str], given: Mapping[str, object]
) -> dict[str, FunctionType]:
    """The named methods of `class_name` in `member`, as plain functions whose globals are `given` (the
    class itself, its decorators and its base class are not run)."""
    path, tree = _parsed(package, member)
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    if not classes:
        raise LookupError(f"{package} {engine_wheels.RELEASES[package]} {member} defines no class {class_name}")
    wanted = set(methods)
    chosen = [node for node in classes[0].body if isinstance(node, ast.FunctionDef) and node.name in wanted]
    missing = wanted - {node.name for node in chosen}
    if missing:
        raise LookupError(f"{member} {class_name} has no method {sorted(missing)}")
    namespace = dict(given)
    _run(path, chosen, namespace)
    return {name: namespace[name] for name in wanted}


def function_source(package: str, member: str, name: str) -> str:
    """The source text of one top-level function of `member` (for checks of what it passes on)."""
    path, tree = _parsed(package, member)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(path.read_text(encoding="utf-8"), node) or ""
    raise LookupError(f"{package} {engine_wheels.RELEASES[package]} {member} defines no function {name}")
