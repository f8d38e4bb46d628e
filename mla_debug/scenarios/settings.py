"""Declared settings of an engine profile: the knobs a user turns and the facts about the machine that
decide which of the profile's rules apply.

A setting is declared once, in a profile::

    settings:
      VLLM_ROCM_USE_AITER:
        kind: env                  # env (an environment variable), arg (a server argument), fact, or code
        default: "0"               # the value the release uses when nobody sets it
        values: ["0", "1"]         # every value the profile models; anything else is refused
        says: aiter's kernels are used only when this is 1
        source: {package: vllm, version: 0.33.0, file: vllm/envs.py, function: VLLM_ROCM_USE_AITER}

and set, in a scenario built on it (``base: vllm-0.33``), by a scalar: ``settings: {VLLM_ROCM_USE_AITER: 1}``
(or ``--set VLLM_ROCM_USE_AITER=1`` on the command line). A declaration may carry ``value``: the value
the scenario runs with when it is not the default (what `Scenario.to_dict` writes for a set setting).

Values are compared as text: YAML reads ``1`` as a number and ``"1"`` as a string, the command line gives
text, so every value is made canonical text first (true/false for booleans). Env and arg settings are
what a user can change tonight, and a code setting (a module constant such as SGLang's
``_use_aiter_bpreshuffle_gfx95``) what a one-line edit of the engine's source changes; a fact (the HIP
version) describes the machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .checks import reject_unknown, string, type_error
from .citations import Source, parse_source


class SettingKind(str, Enum):
    """What a setting is: how a user changes it, and whether a user can."""

    ENV = "env"  # an environment variable of the serving process
    ARG = "arg"  # a server argument (--fp8-gemm-backend)
    FACT = "fact"  # a fact about the machine (the HIP version); not a knob
    CODE = "code"  # a constant in the engine's source a user can edit in one line (_use_aiter_bpreshuffle_gfx95)

    @property
    def settable(self) -> bool:
        """Whether a user can change it without changing the machine or the engine's code."""
        return self is not SettingKind.FACT


def canonical_value(where: str, key: str, value: Any) -> str:
    """A setting value as canonical text: strings as they are, booleans as true/false, numbers as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise type_error(where, key, value, "a scalar (a string, number or bool)")


def setting_text(name: str, kind: SettingKind, value: str) -> str:
    """How a user writes a setting: ``NAME=value`` for an environment variable, ``--arg value`` for a
    server argument, ``NAME = value`` for a fact or a source constant."""
    if kind is SettingKind.ENV:
        return f"{name}={value}"
    if kind is SettingKind.ARG:
        return f"{name} {value}"
    return f"{name} = {value}"


@dataclass(frozen=True)
class Setting:
    """One declared setting: its kind, the release's default, the values modelled, what it does and
    where the release reads it."""

    name: str
    kind: SettingKind
    default: str
    values: tuple[str, ...]
    says: str
    source: Source | None = None

    def text(self, value: str) -> str:
        """How a user writes it with `value` (see `setting_text`)."""
        return setting_text(self.name, self.kind, value)

    def check(self, where: str, value: Any) -> str:
        """`value` as canonical text, refused (naming the allowed values) unless it is one of them."""
        text = canonical_value(where, f"settings.{self.name}", value)
        if text not in self.values:
            raise ValueError(
                f"{where}: setting {self.name} = {text!r} is not allowed; allowed values: {', '.join(self.values)}"
            )
        return text

    def to_dict(self, value: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "default": self.default,
            "values": list(self.values),
            "says": self.says,
        }
        if self.source is not None:
            out["source"] = self.source.to_dict()
        if value is not None and value != self.default:
            out["value"] = value
        return out


DECLARATION_KEYS = ("kind", "default", "values", "says", "source", "value")


def _declaration(where: str, name: str, data: Mapping) -> tuple[Setting, str | None]:
    at = f"{where}: setting {name}"
    reject_unknown(at, "key(s)", data, list(DECLARATION_KEYS))
    missing = [key for key in ("kind", "default", "values", "says") if key not in data]
    if missing:
        raise ValueError(f"{at}: lacks {', '.join(missing)}; a declaration has {', '.join(DECLARATION_KEYS[:5])}")
    kinds = [kind.value for kind in SettingKind]
    if data["kind"] not in kinds:
        raise ValueError(f"{at}: kind {data['kind']!r} is not one of {', '.join(kinds)}")
    values = data["values"]
    if not isinstance(values, (list, tuple)) or not values:
        raise type_error(at, "values", values, "a non-empty list of the values the profile models")
    texts = tuple(dict.fromkeys(canonical_value(at, "values", value) for value in values))
    says = string(at, "says", data["says"], "a non-empty string saying what the setting does")
    source = parse_source(at, data["source"]) if "source" in data else None
    setting = Setting(name, SettingKind(data["kind"]), "", texts, says, source)
    default = setting.check(at, data["default"])
    chosen = setting.check(at, data["value"]) if "value" in data else None
    return Setting(name, setting.kind, default, texts, says, source), chosen


def parse_settings(
    where: str, value: Any, declared: Mapping[str, Setting], chosen: Mapping[str, str]
) -> tuple[dict[str, Setting], dict[str, str]]:
    """The ``settings`` key on top of the inherited declarations and chosen values: a mapping declares
    (or re-declares) a setting, a scalar sets a declared one. Returns (declarations, chosen values)."""
    if not isinstance(value, Mapping):
        raise type_error(
            where, "settings", value, "a mapping {NAME: declaration mapping, or a value for a declared setting}"
        )
    declared, chosen = dict(declared), dict(chosen)
    for name, entry in value.items():
        string(where, "settings", name, "a mapping whose keys are setting names (non-empty strings)")
        if isinstance(entry, Mapping):
            setting, value_set = _declaration(where, name, entry)
            declared[name] = setting
            chosen.pop(name, None)
            if value_set is not None and value_set != setting.default:
                chosen[name] = value_set
            continue
        if name not in declared:
            listed = ", ".join(declared) or "(none: declare it as a mapping {kind, default, values, says, source})"
            raise ValueError(f"{where}: settings: {name} is not a declared setting; declared: {listed}")
        text = declared[name].check(where, entry)
        if text == declared[name].default:
            chosen.pop(name, None)
        else:
            chosen[name] = text
    return declared, chosen


def settings_in_effect(declared: Mapping[str, Setting], chosen: Mapping[str, str]) -> dict[str, str]:
    """Every declared setting's value: the chosen one, else the release's default."""
    return {name: chosen.get(name, setting.default) for name, setting in declared.items()}
