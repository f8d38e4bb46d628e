"""The Python API reference page: the public surface `mla_debug/__init__.py` declares, rendered by
mkdocstrings from the docstrings.

The names come from the root's `__all__`, grouped by the comments that head each group there, so a name
added to (or dropped from) the surface is documented (or dropped) at the next build.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

INTRO = """# Python API

`import mla_debug as md` gives the names below: the entry points, the results they return, and the
types those are made of. Everything else lives one level down, in its layer's package
(`md.kernels.TunedTable`, `md.layouts.unshuffle_weight`, `md.numerics.error_metrics`, ...; the
[package map](architecture.md#package-map) lists every module). This page is generated from
`mla_debug/__init__.py` and the docstrings at build time.
"""


def public_groups(init: Path) -> list[tuple[str, list[str]]]:
    """(group title, names) in the order of `__all__`; a `# comment` line inside the list starts a group."""
    source = init.read_text(encoding="utf-8")
    match = re.search(r"^__all__\s*=\s*\[(.*?)^\]", source, flags=re.S | re.M)
    if match is None:
        raise ValueError(f"{init}: no `__all__ = [...]` list to document")
    groups: list[tuple[str, list[str]]] = [("Public names", [])]
    for line in match.group(1).splitlines():
        line = line.strip()
        if line.startswith("#"):
            groups.append((line.lstrip("# ").strip(), []))
        elif line:
            groups[-1][1].extend(ast.literal_eval(f"[{line}]"))
    return [(title[0].upper() + title[1:], names) for title, names in groups if names]


def layer_packages(init: Path) -> list[str]:
    """The subpackages the root imports as attributes (`from . import (...)`): the second tier."""
    names = []
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            names += [alias.name for alias in node.names]
    return names


def target(package, name: str) -> str:
    """The path mkdocstrings renders for `package.name`: where a class or function is defined (a
    re-exported function can share its name with a submodule, which a path through the package would
    reach instead), the package's own path for a module or a constant."""
    obj = getattr(package, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    if inspect.ismodule(obj):
        return obj.__name__
    return f"{package.__name__}.{name}"


def api_reference(package) -> str:
    """The page for `package` (the imported package root): its `__all__` by group, then its layer packages."""
    init = Path(package.__file__)
    lines = [INTRO]
    for title, names in public_groups(init):
        lines += [f"## {title}", ""]
        for name in names:
            if name.startswith("__"):
                continue
            obj = getattr(package, name)
            lines += [f"::: {target(package, name)}"]
            if inspect.ismodule(obj):
                lines += ["    options:", "      members: false"]
            lines.append("")
            entry = getattr(obj, name, None) if inspect.ismodule(obj) and callable(obj) else None
            if inspect.isfunction(entry):
                # A callable package (md.capture, md.triage): what calling it does.
                lines += [f"::: {entry.__module__}.{entry.__qualname__}", "    options:", "      heading_level: 4"]
                lines += [f'      heading: "md.{name}(...)"', ""]
    documented = {name for _, names in public_groups(init) for name in names}
    packages = [name for name in layer_packages(init) if name not in documented]
    if packages:
        lines += [
            "## Layer packages",
            "",
            "The second tier: `md.<package>.<name>` (and `md.capture`, `md.triage` above).",
            "",
        ]
        for name in packages:
            lines += [f"::: {package.__name__}.{name}", "    options:", "      members: false", ""]
    return "\n".join(lines)
