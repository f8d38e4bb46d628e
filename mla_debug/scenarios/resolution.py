"""What resolving an engine profile on a platform decided, as plain data: the engine, the settings in
effect and the rules that applied. A resolved Scenario carries it (`Scenario.resolution`) and a triage
report keeps it, so a verdict can be traced to the rules - and the engine's code - that produced it."""

from __future__ import annotations

from dataclasses import dataclass

from .._json_records import JsonRecord
from .citations import Engine, Source
from .rules import Rule
from .settings import SettingKind, setting_text


@dataclass(frozen=True)
class SettingInEffect(JsonRecord):
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


@dataclass(frozen=True)
class AppliedRule(JsonRecord):
    """A rule that applied: its id, what it says, where the engine does it."""

    id: str
    says: str
    source: Source | None = None

    @classmethod
    def of(cls, rule: Rule) -> AppliedRule:
        return cls(rule.id, rule.says, rule.source)


@dataclass(frozen=True)
class Resolution(JsonRecord):
    """How a scenario with an engine, settings or rules was resolved on one platform."""

    platform: str
    engine: Engine | None
    settings: tuple[SettingInEffect, ...]
    rules: tuple[AppliedRule, ...]

    @property
    def changed_settings(self) -> tuple[SettingInEffect, ...]:
        """The settings whose value is not the release's default."""
        return tuple(s for s in self.settings if not s.is_default)
