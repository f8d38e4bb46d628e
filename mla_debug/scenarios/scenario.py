"""The Scenario type: a named serving behaviour - a kernel policy recipe plus model-side behaviours - as
data. The built-in ones are in `seed_scenarios.py`; scenario files (YAML/JSON) are parsed by `scenario_files.py`; engine
profiles (a release's settings and rules) are scenario files under ``data/engines/`` (`lookup.py`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..kernels import KernelPolicy, Platform, TritonConfigTable, TunedTable, platform
from .behaviour import ModelBehaviour
from .citations import Engine
from .reachability import Reachability
from .resolution import AppliedRule, Resolution, SettingInEffect
from .rules import Rule, apply_rules
from .scenario_files import parse_scenario, read_scenario_file
from .settings import Setting, parse_settings, settings_in_effect
from .shipped_data import profile_names

_EFFECTIVE = (
    "priority",
    "preshuffled_first",
    "disabled",
    "overrides",
    "kernel_options",
    "behaviour",
    "tuned_path",
    "triton_configs_path",
)


# How a scenario file's ``base`` and ``fixed_by`` names are found (`lookup.named_scenario`, which imports
# this module and registers itself when the package loads): a registry of one, so the two never import
# each other.
_NAMED: list[Callable[[str], Scenario]] = []


def register_named_lookup(lookup: Callable[[str], Scenario]) -> None:
    _NAMED[:] = [lookup]


def _named_lookup() -> Callable[[str], Scenario]:
    if not _NAMED:
        raise RuntimeError("no scenario lookup is registered: import mla_debug.scenarios, not its modules alone")
    return _NAMED[0]


@dataclass(frozen=True)
class Scenario:
    """A named serving behaviour: how kernels are chosen (a KernelPolicy recipe) and what the model does.

    ``tuned_path`` holds one path or a tuple of paths (aiter tuned CSVs or a configs/ folder); None
    uses `TunedTable.default()` (aiter's env var, an installed aiter, else the embedded shapes).
    ``triton_configs_path`` likewise names folders of aiter Triton config JSON files; None uses
    `TritonConfigTable.default()` (the pinned aiter release's configs).

    An engine profile also has an ``engine``, declared ``settings`` (with the values ``chosen`` away
    from the release's defaults) and ``rules``; the fields above are then what holds before any rule.
    `resolve` applies the rules for one platform and the settings in effect and gives a plain scenario
    (no rules) that records what it decided (``resolution``) and what it was resolved from
    (``origin``, on ``resolved_on``) - so a setting can be changed on it later (`with_settings`).
    Everything that runs a scenario resolves it first (`policy`, the layer builder, triage), so a
    scenario without rules, settings or engine is its own resolution.
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
    # upstream change known to fix it (a named scenario). Triage runs the fix to say whether it restores.
    upstream: str = ""
    fixed_by: str = ""
    engine: Engine | None = None
    # A hazard file's verdict about its release (`reachability`): never inherited by a scenario built on it.
    reachable: Reachability | None = None
    settings: dict[str, Setting] = field(default_factory=dict)
    chosen: dict[str, str] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    resolution: Resolution | None = None
    origin: Scenario | None = field(default=None, compare=False, repr=False)
    resolved_on: Platform | None = field(default=None, compare=False, repr=False)

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
        return cls(**parse_scenario(cls, data, name, _named_lookup(), source=source, relative_to=relative_to))

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
        platform's default order, and `from_dict` refuses both together). A resolved profile writes its
        resolved fields, engine and settings (a set one with its ``value``) and no rules: a plain
        scenario that resolves to the same fields.
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
        if self.reachable is not None:
            out["reachable"] = self.reachable.to_dict()
        if self.fixed_by:
            out["fixed_by"] = self.fixed_by
        if self.engine is not None:
            out["engine"] = self.engine.to_dict()
        if self.settings:
            out["settings"] = {name: s.to_dict(self.chosen.get(name)) for name, s in self.settings.items()}
        if self.rules:
            out["rules"] = [rule.to_dict() for rule in self.rules]
        return out

    # -- engine profiles -----------------------------------------------------------------------------
    @property
    def is_profile(self) -> bool:
        """Whether the scenario has an engine, settings or rules (resolving it does something)."""
        return self.engine is not None or bool(self.settings) or bool(self.rules)

    def setting_values(self) -> dict[str, str]:
        """Every declared setting's value in effect (the chosen one, else the release's default)."""
        return settings_in_effect(self.settings, self.chosen)

    def resolve(self, plat: Platform | str) -> Scenario:
        """The plain scenario this one is on `plat`: the rules that hold there under the settings in
        effect applied in order (`rules.apply_rules`), recorded in ``resolution``. A scenario without
        engine, settings or rules, and one already resolved on `plat`, is returned as it is.

        >>> md.scenario("vllm-0.33").with_settings({"VLLM_ROCM_USE_AITER": "1"}).resolve("mi355x").priority
        """
        plat = platform(plat)
        if self.resolution is not None:
            if self.resolution.platform != plat.name:
                raise ValueError(
                    f"scenario {self.name!r} was resolved on {self.resolution.platform}; resolve its profile "
                    f"(scenario.origin) on {plat.name} instead"
                )
            return self
        if not self.is_profile:
            return self
        values = self.setting_values()
        base = {key: getattr(self, key) for key in ("priority", "disabled", "overrides", "kernel_options", "behaviour")}
        resolved, applied = apply_rules(base, self.rules, plat, values)
        in_effect = tuple(
            SettingInEffect(name, s.kind, values[name], s.default, s.source) for name, s in self.settings.items()
        )
        record = Resolution(plat.name, self.engine, in_effect, tuple(AppliedRule.of(rule) for rule in applied))
        return replace(self, rules=(), resolution=record, origin=self, resolved_on=plat, **resolved)

    def with_settings(self, values: Mapping[str, Any]) -> Scenario:
        """The scenario with declared settings set (``{"VLLM_ROCM_USE_AITER": "1"}``; values as text, or
        numbers and booleans, which are made text). An undeclared name or a value not allowed raises
        ValueError naming the declared settings or allowed values. On a resolved scenario the profile
        it came from is re-resolved with the settings - so set settings before any other change.

        >>> md.scenario("sglang-0.5.23").with_settings({"SGLANG_USE_AITER": "1", "hip_version": "7.2"})
        """
        where = f"scenario {self.name!r}"
        if not isinstance(values, Mapping):
            raise TypeError(f"{where}: settings are given as a mapping {{NAME: value}}, got {type(values).__name__}")
        for name, value in values.items():
            if isinstance(value, (Mapping, list, tuple)) or value is None:
                raise ValueError(f"{where}: setting {name} takes one value, got {value!r}")
        if self.resolution is not None:
            if self.origin is None or self.resolved_on is None:
                raise ValueError(f"{where}: it was resolved without a profile to re-resolve; set settings before")
            if self._drifted():
                raise ValueError(
                    f"{where}: changed after it was resolved on {self.resolution.platform}; set settings before "
                    "other changes (triage.changes.apply_all orders them so)"
                )
            return replace(self.origin.with_settings(values).resolve(self.resolved_on), name=self.name)
        if not self.settings:
            profiles = ", ".join(profile_names()) or "none found"
            raise ValueError(f"{where} declares no settings; engine profiles do ({profiles})")
        _, chosen = parse_settings(where, dict(values), self.settings, self.chosen)
        return replace(self, chosen=chosen)

    def effective_fields(self) -> tuple:
        """The fields that decide what runs (kernel choice and model behaviour), for comparing two
        resolved scenarios regardless of their names, descriptions and records."""
        return tuple(getattr(self, key) for key in _EFFECTIVE)

    def _drifted(self) -> bool:
        """Whether this resolved scenario's fields differ from a fresh resolution of its origin."""
        return self.effective_fields() != self.origin.resolve(self.resolved_on).effective_fields()

    def policy(self, plat: Platform | str, tuned: TunedTable | None = None) -> KernelPolicy:
        """The KernelPolicy this scenario uses on `plat` (that of its resolution there)."""
        plat = platform(plat)
        scen = self.resolve(plat)
        if tuned is None:
            tuned = TunedTable.from_csv(scen.tuned_path) if scen.tuned_path else TunedTable.default()
        triton_configs = TritonConfigTable.from_folder(scen.triton_configs_path) if scen.triton_configs_path else None
        common = dict(
            disabled=set(scen.disabled),
            tuned=tuned,
            triton_configs=triton_configs,
            overrides=dict(scen.overrides),
            kernel_options={k: dict(v) for k, v in scen.kernel_options.items()},
        )
        if scen.priority is not None:
            return KernelPolicy(priority=list(scen.priority), **common)
        return KernelPolicy.for_platform(plat, preshuffled_first=scen.preshuffled_first, native=False, **common)
