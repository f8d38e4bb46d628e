"""Serving behaviours as data: the Scenario type, the built-in scenarios, scenario files, and the
model-side behaviour flags only scenarios set."""

from __future__ import annotations

from .behaviour import ModelBehaviour
from .builtin import SCENARIOS, scenario, scenario_names
from .scenario import Scenario

__all__ = ["SCENARIOS", "ModelBehaviour", "Scenario", "scenario", "scenario_names"]
