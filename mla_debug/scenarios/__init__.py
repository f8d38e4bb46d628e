"""Serving behaviours as data: the Scenario type, the built-in seed scenarios, scenario files, the
engine profiles shipped under data/engines/ (a release's settings and rules, resolved per platform),
and the model-side behaviour flags only scenarios set."""

from __future__ import annotations

from .behaviour import ModelBehaviour
from .citations import Engine, Source
from .lookup import scenario, scenario_names
from .reachability import Evidence, Reach, Reachability
from .resolution import AppliedRule, Resolution, SettingInEffect
from .rules import Rule, When
from .scenario import Scenario
from .seed_scenarios import SCENARIOS
from .settings import Setting, SettingKind
from .shipped_data import data_folder, engine_profile_files, profile_names

__all__ = [
    "SCENARIOS",
    "AppliedRule",
    "Engine",
    "Evidence",
    "ModelBehaviour",
    "Reach",
    "Reachability",
    "Resolution",
    "Rule",
    "Scenario",
    "Setting",
    "SettingInEffect",
    "SettingKind",
    "Source",
    "When",
    "data_folder",
    "engine_profile_files",
    "profile_names",
    "scenario",
    "scenario_names",
]
