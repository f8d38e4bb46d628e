"""MLA layer configurations, checkpoints, linear layers, DeepSeek-V3 and V4 attention, stepping."""

from .checkpoint import Checkpoint, expected_shapes
from .config import PRESETS, MLAConfig, RopeScaling
from .records import StepRecord

__all__ = ["PRESETS", "Checkpoint", "MLAConfig", "RopeScaling", "StepRecord", "expected_shapes"]
