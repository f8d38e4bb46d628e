"""Single functions of the released engines, loaded from the wheels and run as written (tests only).

The modules they live in import CUDA/ROCm extensions at import time, so the modules are never imported:
`load` compiles just the named top-level functions of one file (`mla_debug.real_aiter.source`) against
a namespace the test gives - torch, typing names, and the module constants the functions read, which
`module_constants` takes from the engine's own code where they are computed at import.
"""

from __future__ import annotations

import ast
import typing
from functools import cache
from pathlib import Path

import torch
from engine_wheels import extract, require

from mla_debug.real_aiter.source import load_functions

_TYPING = {name: getattr(typing, name) for name in ("Any", "Callable", "List", "Optional", "Tuple", "Union")}


@cache
def _extracted(package: str, member: str, dest: str) -> Path:
    return extract(package, [member], Path(dest)) / member


def engine_file(package: str, member: str, tmp_root: Path) -> Path:
    """The wheel member unzipped under `tmp_root` (skips the test when the wheel is missing)."""
    require(package)
    return _extracted(package, member, str(tmp_root))


def load(package: str, member: str, names: list[str], tmp_root: Path, **namespace) -> dict:
    """{name: function} for top-level functions `names` of the wheel's file `member`."""
    path = engine_file(package, member, tmp_root)
    return load_functions(path, names, {"torch": torch, **_TYPING, **namespace})


def module_constants(package: str, member: str, tmp_root: Path, test_name: str, **namespace) -> dict:
    """Run the file's top-level ``if <test_name>(): ...`` statement (e.g. SGLang's ``if is_fp8_fnuz():``
    choice of fp8 dtype and max) in `namespace` plus torch; returns the names it assigned."""
    path = engine_file(package, member, tmp_root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Call)
        and isinstance(node.test.func, ast.Name)
        and node.test.func.id == test_name
    ]
    if len(found) != 1:
        raise LookupError(f"{path}: expected one top-level 'if {test_name}():', found {len(found)}")
    scope = {"torch": torch, **namespace}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), scope)  # noqa: S102
    return {k: v for k, v in scope.items() if k not in namespace and k not in ("torch", "__builtins__")}
