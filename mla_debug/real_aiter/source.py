"""Running chosen top-level functions of an aiter source file without running the file.

Some of aiter's pure-Python functions live in modules whose import does far more than define them:
``aiter/ops/quant.py`` imports ``aiter.jit.core``, which at import probes the GPU with ``rocminfo`` and
merges tuned CSVs into /tmp; ``aiter/ops/gemm_op_a8w8.py`` likewise. Their functions themselves are plain
Python over torch or pandas. `load_functions` parses the file, compiles only the named ``def`` statements
(their decorators included, verbatim) against a namespace the caller provides, and returns them: aiter's
own code, executed as written, with the module-level side effects left out. Tracebacks point into aiter's
file, at the real line numbers.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any


def load_functions(path: Path, names: Iterable[str], namespace: Mapping[str, Any]) -> dict[str, Callable]:
    """{name: function} for the top-level functions `names` of the Python file `path`.

    `namespace` supplies the module globals those functions use (torch, pandas, other functions...);
    every function gets the same fresh dict, so functions that call each other can be loaded together.
    A missing name raises LookupError naming the file and the functions it does define.
    """
    wanted = list(dict.fromkeys(names))
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    defs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    missing = [name for name in wanted if name not in defs]
    if missing:
        raise LookupError(f"{path}: no top-level function {missing}; it defines {sorted(defs)}")
    module = ast.Module(body=[defs[name] for name in wanted], type_ignores=[])
    globals_: dict[str, Any] = {"__name__": f"aiter_source:{path.name}", "__file__": str(path), **namespace}
    exec(compile(module, str(path), "exec"), globals_)  # noqa: S102 - aiter's own definitions, nothing else
    return {name: globals_[name] for name in wanted}
