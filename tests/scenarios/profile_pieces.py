"""What a shipped engine profile names that this checkout may not have yet: kernels, kernel options,
ModelBehaviour fields and platforms. The profiles use the names the project has fixed for them; a test
that loads a real profile skips, saying which pieces it needs, until every one exists - and then fails
on anything else that is wrong with the file."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from mla_debug.kernels import KERNELS, PLATFORMS
from mla_debug.scenarios import ModelBehaviour, engine_profile_files

_KERNEL_LISTS = ("priority", "disabled")


def _sections(data: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The top level and every rule's ``then``: where kernels, options and behaviour fields are named."""
    yield data
    for rule in data.get("rules") or []:
        if isinstance(rule, dict) and isinstance(rule.get("then"), dict):
            yield rule["then"]


def missing_pieces(data: dict[str, Any]) -> list[str]:
    """'kernel deepgemm', 'kernel option aiter-triton-blockscale.selection', 'ModelBehaviour field
    absorbed_weight_dtype', 'platform b200': each piece `data` names that is not registered here."""
    missing: list[str] = []
    behaviour = {f.name for f in fields(ModelBehaviour)}

    def kernel(name: str) -> bool:
        if name in KERNELS:
            return True
        missing.append(f"kernel {name}")
        return False

    for section in _sections(data):
        for key in _KERNEL_LISTS:
            value = section.get(key)
            for name in [value] if isinstance(value, str) else value or []:
                kernel(name)
        for name in (section.get("overrides") or {}).values():
            kernel(name)
        for name, options in (section.get("kernel_options") or {}).items():
            if not kernel(name):
                continue
            params = inspect.signature(KERNELS.get(name)).parameters
            for option in options:
                if option not in params:
                    missing.append(f"kernel option {name}.{option}")
        for name in section.get("behaviour") or {}:
            if name not in behaviour:
                missing.append(f"ModelBehaviour field {name}")
    for rule in data.get("rules") or []:
        platforms = (rule.get("when") or {}).get("platform") or []
        for name in [platforms] if isinstance(platforms, str) else platforms:
            if name not in PLATFORMS:
                missing.append(f"platform {name}")
    return list(dict.fromkeys(missing))


def require_pieces(path: Path, platforms: Iterable[str] = ()) -> dict[str, Any]:
    """The file's data; skips the calling test with 'needs kernel X, ...' while a piece is missing."""
    data = yaml.safe_load(path.read_text())
    missing = missing_pieces(data) + [f"platform {p}" for p in platforms if p not in PLATFORMS]
    base = engine_profile_files().get(data.get("base", ""))
    if base is not None:
        missing += missing_pieces(yaml.safe_load(base.read_text()))
    if missing:
        pytest.skip("needs " + ", ".join(dict.fromkeys(missing)))
    return data
