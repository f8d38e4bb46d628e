"""The Scenario type: a named serving behaviour - a kernel policy recipe plus model-side behaviours - as
data. The built-in ones are in `builtin.py`; scenario files (YAML/JSON) are parsed by `files.py`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..kernels import KernelPolicy, Platform, TritonConfigTable, TunedTable, platform
from .behaviour import ModelBehaviour
from .files import parse_scenario, read_scenario_file


@dataclass(frozen=True)
class Scenario:
    """A named serving behaviour: how kernels are chosen (a KernelPolicy recipe) and what the model does.

    ``tuned_path`` holds one path or a tuple of paths (aiter tuned CSVs or a configs/ folder); None
    uses `TunedTable.default()` (aiter's env var, an installed aiter, else the embedded shapes).
    ``triton_configs_path`` likewise names folders of aiter Triton config JSON files; None uses
    `TritonConfigTable.default()` (the pinned aiter release's configs).
    """

    name: str
    description: str
    priority: tuple[str, ...] | None = None  # None: KernelPolicy.for_platform's vLLM-like default
    preshuffled_first: bool = True
    disabled: tuple[str, ...] = ()
    overrides: dict[str, str] = field(default_factory=dict)
    kernel_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    behaviour: ModelBehaviour = field(default_factory=ModelBehaviour)
    tuned_path: str | tuple[str, ...] | None = None
    triton_configs_path: str | tuple[str, ...] | None = None
    # The upstream change this scenario models ("vLLM PR #51692"), and the scenario that models the
    # upstream change known to fix it (a built-in name). Triage runs the fix to say whether it restores.
    upstream: str = ""
    fixed_by: str = ""

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        name: str | None = None,
        *,
        source: str | None = None,
        relative_to: str | os.PathLike | None = None,
    ) -> Scenario:
        """A scenario from a mapping (the keys of a scenario file), validated eagerly.

        `name` is used when `data` has no ``name`` key; `source` names the origin in error messages;
        relative ``tuned`` paths are resolved against `relative_to` (default: the working directory).
        Unknown keys, wrong types, unknown kernels or kernel options raise ValueError naming them.

        >>> Scenario.from_dict({"name": "no-flags", "base": "vllm-pr56433",
        ...                     "kernel_options": {"aiter-bpreshuffle": {"honour_layer_flags": False}}})
        """
        return cls(**parse_scenario(cls, data, name, builtin_scenarios(), source=source, relative_to=relative_to))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Scenario:
        """A scenario from a .yml/.yaml or .json file; the name defaults to the file's stem and relative
        ``tuned`` paths are taken relative to the file's folder.

        >>> md.Scenario.from_file("scenarios/ignore-flags.yaml")
        """
        path = Path(path).expanduser()
        data = read_scenario_file(path)
        return cls.from_dict(data, name=path.stem, source=f"scenario file {path}", relative_to=path.parent.absolute())

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, dicts, str, bool) that `from_dict` turns back into an equal Scenario;
        ``yaml.safe_dump(s.to_dict())`` is a valid scenario file.

        ``preshuffled_first`` is written only without an explicit ``priority`` (it shapes only the
        platform's default order, and `from_dict` refuses both together).
        """
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.priority is not None:
            out["priority"] = list(self.priority)
        else:
            out["preshuffled_first"] = self.preshuffled_first
        out["disabled"] = list(self.disabled)
        out["overrides"] = dict(self.overrides)
        out["kernel_options"] = {kernel: dict(options) for kernel, options in self.kernel_options.items()}
        out["behaviour"] = {f.name: getattr(self.behaviour, f.name) for f in fields(self.behaviour)}
        if self.tuned_path is not None:
            out["tuned"] = self.tuned_path if isinstance(self.tuned_path, str) else list(self.tuned_path)
        if self.triton_configs_path is not None:
            path = self.triton_configs_path
            out["triton_configs"] = path if isinstance(path, str) else list(path)
        if self.upstream:
            out["upstream"] = self.upstream
        if self.fixed_by:
            out["fixed_by"] = self.fixed_by
        return out

    def policy(self, plat: Platform | str, tuned: TunedTable | None = None) -> KernelPolicy:
        """The KernelPolicy this scenario uses on `plat`."""
        plat = platform(plat)
        if tuned is None:
            tuned = TunedTable.from_csv(self.tuned_path) if self.tuned_path else TunedTable.default()
        triton_configs = TritonConfigTable.from_folder(self.triton_configs_path) if self.triton_configs_path else None
        common = dict(
            disabled=set(self.disabled),
            tuned=tuned,
            triton_configs=triton_configs,
            overrides=dict(self.overrides),
            kernel_options={k: dict(v) for k, v in self.kernel_options.items()},
        )
        if self.priority is not None:
            return KernelPolicy(priority=list(self.priority), **common)
        return KernelPolicy.for_platform(plat, preshuffled_first=self.preshuffled_first, native=False, **common)


def builtin_scenarios() -> dict[str, Scenario]:
    """The built-in scenarios, usable as a scenario file's ``base`` (imported late: they are Scenarios)."""
    from .builtin import SCENARIOS

    return SCENARIOS
