"""The rules of an engine profile: on which platforms, under which settings, the engine changes which
scenario keys - and where in the engine's code it does so.

::

    rules:
      - id: rocm-aiter
        says: with aiter on, AiterFp8BlockScaledMMKernel comes first in the ROCm block-FP8 list
        when: {vendor: amd, settings: {VLLM_ROCM_USE_AITER: "1"}}
        then: {priority: [aiter-blockscale, torch-reference]}
        source: {package: vllm, version: 0.33.0, file: ..., function: ...}

``when`` holds conditions that must all hold (each left out holds always): ``vendor`` (amd, nvidia, cpu),
``arch`` (gfx950, sm90, ...), ``platform`` (preset names) - a name or a list of names, any of which
matches - and ``settings``: {NAME: value or list of values}. ``then`` holds scenario keys: ``priority``
(replaces), ``disabled`` (accumulates across rules), ``overrides`` and ``kernel_options`` (merged, a later
rule winning per layer or option), ``behaviour`` (merged field by field). Rules apply in order, so a
later rule refines an earlier one.

A scenario built on a profile replaces a rule by giving one with the same ``id`` (in place, keeping the
order) and adds rules by giving new ids (after the inherited ones): the way to model a fork.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..kernels import PLATFORMS, Platform
from . import checks
from .citations import Source, parse_source
from .settings import Setting

VENDORS = ("amd", "nvidia", "cpu")
# An architecture as the platforms name it: gfx942, gfx950, gfx1250 on AMD; sm90, sm100 on NVIDIA.
_ARCH = re.compile(r"^(gfx[0-9a-f]{3,4}|sm[0-9]{2,3}[a-z]?|cpu)$")

RULE_KEYS = ("id", "says", "when", "then", "source")
WHEN_KEYS = ("vendor", "arch", "platform", "settings")
THEN_KEYS = ("priority", "disabled", "overrides", "kernel_options", "behaviour")


@dataclass(frozen=True)
class When:
    """A rule's conditions; an empty tuple is no condition."""

    vendor: tuple[str, ...] = ()
    arch: tuple[str, ...] = ()
    platform: tuple[str, ...] = ()
    settings: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def holds(self, plat: Platform, values: Mapping[str, str]) -> bool:
        """Whether every condition holds on `plat` with the settings `values` in effect."""
        if self.vendor and plat.vendor not in self.vendor:
            return False
        if self.arch and plat.arch not in self.arch:
            return False
        if self.platform and plat.name not in self.platform:
            return False
        return all(values.get(name) in accepted for name, accepted in self.settings)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("vendor", "arch", "platform"):
            names = getattr(self, key)
            if names:
                out[key] = names[0] if len(names) == 1 else list(names)
        if self.settings:
            out["settings"] = {name: vals[0] if len(vals) == 1 else list(vals) for name, vals in self.settings}
        return out


@dataclass(frozen=True)
class Rule:
    """One rule: an id, what it says in words, when it applies, the scenario keys it sets, its source.
    ``then`` holds the validated keys in their plain form (what a scenario file writes)."""

    id: str
    says: str
    when: When
    then: dict[str, Any] = field(default_factory=dict)
    source: Source | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "says": self.says}
        when = self.when.to_dict()
        if when:
            out["when"] = when
        out["then"] = {
            key: (list(value) if isinstance(value, tuple) else value) for key, value in _copy_then(self.then).items()
        }
        if self.source is not None:
            out["source"] = self.source.to_dict()
        return out


def _copy_then(then: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in then.items():
        if key == "kernel_options":
            out[key] = {kernel: dict(options) for kernel, options in value.items()}
        elif isinstance(value, Mapping):
            out[key] = dict(value)
        else:
            out[key] = value
    return out


# -- parsing -----------------------------------------------------------------------------------------


def _names(where: str, key: str, value: Any) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) and n for n in names):
        raise checks.type_error(where, f"when.{key}", value, "a name or a non-empty list of names")
    return tuple(dict.fromkeys(names))


def _when(where: str, value: Any, declared: Mapping[str, Setting]) -> When:
    if not isinstance(value, Mapping):
        raise checks.type_error(where, "when", value, f"a mapping with keys among {', '.join(WHEN_KEYS)}")
    checks.reject_unknown(where, "when key(s)", value, list(WHEN_KEYS))
    vendor = _names(where, "vendor", value["vendor"]) if "vendor" in value else ()
    for name in vendor:
        if name not in VENDORS:
            raise ValueError(f"{where}: when.vendor {name!r} is not one of {', '.join(VENDORS)}")
    arch = _names(where, "arch", value["arch"]) if "arch" in value else ()
    for name in arch:
        if not _ARCH.match(name):
            raise ValueError(
                f"{where}: when.arch {name!r} is not an architecture name (gfx942, gfx950, gfx1250, sm90, sm100, cpu)"
            )
    plats = _names(where, "platform", value["platform"]) if "platform" in value else ()
    for name in plats:
        if name not in PLATFORMS:
            raise ValueError(f"{where}: when.platform {name!r} is not a platform; valid: {', '.join(PLATFORMS)}")
    conditions: list[tuple[str, tuple[str, ...]]] = []
    if "settings" in value:
        wanted = value["settings"]
        if not isinstance(wanted, Mapping) or not wanted:
            raise checks.type_error(where, "when.settings", wanted, "a non-empty mapping {setting: value or list}")
        for name, accepted in wanted.items():
            if name not in declared:
                raise ValueError(
                    f"{where}: when.settings: {name} is not a declared setting; declared: {', '.join(declared) or '(none)'}"
                )
            items = accepted if isinstance(accepted, (list, tuple)) else [accepted]
            if not items:
                raise checks.type_error(where, f"when.settings.{name}", accepted, "a value or a non-empty list")
            texts = tuple(dict.fromkeys(declared[name].check(where, item) for item in items))
            conditions.append((name, texts))
    return When(vendor, arch, plats, tuple(conditions))


def _then(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not value:
        raise checks.type_error(where, "then", value, f"a non-empty mapping with keys among {', '.join(THEN_KEYS)}")
    checks.reject_unknown(where, "then key(s)", value, list(THEN_KEYS))
    out: dict[str, Any] = {}
    if "priority" in value:
        if value["priority"] is None:
            raise checks.type_error(where, "then.priority", None, "a non-empty list of kernel names")
        out["priority"] = list(checks.priority(where, value["priority"], "then.priority"))
    if "disabled" in value:
        out["disabled"] = list(checks.disabled(where, value["disabled"], "then.disabled"))
    if "overrides" in value:
        out["overrides"] = checks.overrides(where, value["overrides"], "then.overrides")
    if "kernel_options" in value:
        out["kernel_options"] = checks.kernel_options(where, value["kernel_options"], "then.kernel_options")
    if "behaviour" in value:
        out["behaviour"] = checks.behaviour(where, value["behaviour"], "then.behaviour")
    return out


def parse_rule(where: str, value: Any, declared: Mapping[str, Setting]) -> Rule:
    """One rule mapping, validated (`where` names the file; the rule's id is added to messages)."""
    if not isinstance(value, Mapping):
        raise checks.type_error(where, "rules[]", value, f"a mapping with keys {', '.join(RULE_KEYS)}")
    if "id" not in value:
        raise ValueError(f"{where}: a rule lacks 'id'; every rule has {', '.join(RULE_KEYS)}")
    rule_id = checks.string(where, "id", value["id"], "a non-empty string naming the rule")
    at = f"{where}: rule {rule_id}"
    checks.reject_unknown(at, "key(s)", value, list(RULE_KEYS))
    missing = [key for key in ("says", "then") if key not in value]
    if missing:
        raise ValueError(f"{at}: lacks {', '.join(missing)}; a rule has {', '.join(RULE_KEYS)}")
    says = checks.string(at, "says", value["says"], "a non-empty string saying what the engine does")
    when = _when(at, value["when"], declared) if "when" in value else When()
    source = parse_source(at, value["source"]) if "source" in value else None
    return Rule(rule_id, says, when, _then(at, value["then"]), source)


def parse_rules(where: str, value: Any, declared: Mapping[str, Setting], inherited: Sequence[Rule]) -> tuple[Rule, ...]:
    """The ``rules`` list on top of the inherited rules: a rule whose id is inherited replaces that rule
    in place, a new id is added at the end. Ids are unique within one list."""
    if not isinstance(value, (list, tuple)):
        raise checks.type_error(where, "rules", value, "a list of rule mappings {id, says, when, then, source}")
    rules = {rule.id: rule for rule in inherited}
    seen: set[str] = set()
    for item in value:
        rule = parse_rule(where, item, declared)
        if rule.id in seen:
            raise ValueError(f"{where}: rule id {rule.id!r} appears twice; each rule has its own id")
        seen.add(rule.id)
        rules[rule.id] = rule  # an inherited id keeps its place in the dict's order
    return tuple(rules.values())


def check_conditions(where: str, rules: Sequence[Rule], declared: Mapping[str, Setting]) -> None:
    """Every setting a rule's ``when`` names is still declared, with those values allowed (a scenario
    built on a profile may re-declare a setting with other values)."""
    for rule in rules:
        for name, accepted in rule.when.settings:
            at = f"{where}: rule {rule.id}"
            if name not in declared:
                raise ValueError(f"{at}: when.settings: {name} is not a declared setting")
            for text in accepted:
                declared[name].check(at, text)


# -- applying ----------------------------------------------------------------------------------------


def apply_rules(
    base: Mapping[str, Any], rules: Sequence[Rule], plat: Platform, values: Mapping[str, str]
) -> tuple[dict[str, Any], tuple[Rule, ...]]:
    """The scenario fields after every rule that holds on `plat` under `values`, in order, and the rules
    that applied. `base` holds the Scenario fields priority, disabled, overrides, kernel_options and
    behaviour (a ModelBehaviour); they are copied, never changed."""
    out = {
        "priority": base["priority"],
        "disabled": tuple(base["disabled"]),
        "overrides": dict(base["overrides"]),
        "kernel_options": {kernel: dict(options) for kernel, options in base["kernel_options"].items()},
        "behaviour": base["behaviour"],
    }
    applied = []
    for rule in rules:
        if not rule.when.holds(plat, values):
            continue
        applied.append(rule)
        then = rule.then
        if "priority" in then:
            out["priority"] = tuple(then["priority"])
        if "disabled" in then:
            out["disabled"] = tuple(dict.fromkeys((*out["disabled"], *then["disabled"])))
        if "overrides" in then:
            out["overrides"].update(then["overrides"])
        for kernel, options in then.get("kernel_options", {}).items():
            out["kernel_options"].setdefault(kernel, {}).update(options)
        if "behaviour" in then:
            out["behaviour"] = replace(out["behaviour"], **then["behaviour"])
    return out, tuple(applied)
