"""What resolving an engine profile on a platform decided, as plain data: the engine, the settings in
effect and the rules that applied. A resolved Scenario carries it (`Scenario.resolution`) and a triage
report keeps it, so a verdict can be traced to the rules - and the engine's code - that produced it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .citations import Engine, Source
from .rules import Rule
from .settings import SettingKind, setting_text


@dataclass(frozen=True)
class SettingInEffect:
    """One declared setting and the value it had."""

    name: str
    kind: SettingKind
    value: str
    default: str
    source: Source | None = None

    @property
    def text(self) -> str:
        """How a user writes it (``VLLM_ROCM_USE_AITER=1``, ``--fp8-gemm-backend aiter``)."""
        return setting_text(self.name, self.kind, self.value)

    @property
    def is_default(self) -> bool:
        return self.value == self.default

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "value": self.value,
            "default": self.default,
            "source": self.source.to_dict() if self.source else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SettingInEffect:
        source = data.get("source")
        return cls(
            str(data["name"]),
            SettingKind(data["kind"]),
            str(data["value"]),
            str(data["default"]),
            Source(**source) if source else None,
        )


@dataclass(frozen=True)
class AppliedRule:
    """A rule that applied: its id, what it says, where the engine does it."""

    id: str
    says: str
    source: Source | None = None

    @classmethod
    def of(cls, rule: Rule) -> AppliedRule:
        return cls(rule.id, rule.says, rule.source)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "says": self.says, "source": self.source.to_dict() if self.source else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AppliedRule:
        source = data.get("source")
        return cls(str(data["id"]), str(data["says"]), Source(**source) if source else None)


@dataclass(frozen=True)
class Resolution:
    """How a scenario with an engine, settings or rules was resolved on one platform."""

    platform: str
    engine: Engine | None
    settings: tuple[SettingInEffect, ...]
    rules: tuple[AppliedRule, ...]

    @property
    def changed_settings(self) -> tuple[SettingInEffect, ...]:
        """The settings whose value is not the release's default."""
        return tuple(s for s in self.settings if not s.is_default)

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "engine": self.engine.to_dict() if self.engine else None,
            "settings": [s.to_dict() for s in self.settings],
            "rules": [r.to_dict() for r in self.rules],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resolution:
        engine = data.get("engine")
        return cls(
            str(data["platform"]),
            Engine(str(engine["name"]), str(engine["version"])) if engine else None,
            tuple(SettingInEffect.from_dict(s) for s in data.get("settings", [])),
            tuple(AppliedRule.from_dict(r) for r in data.get("rules", [])),
        )
