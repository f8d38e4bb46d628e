"""MLA layer configurations, checkpoints (DeepSeek-V3.2's indexer recognised, dense weights quantized by a
named recipe), linear layers, DeepSeek-V3 and V4 attention, stepping."""

from .checkpoint import Checkpoint, expected_shapes
from .config import PRESETS, MLAConfig
from .indexer import SparseAttentionWarning
from .records import StepRecord
from .rope_scaling import RopeScaling
from .weight_recipe import DenseWeightsError, WeightRecipe

__all__ = [
    "PRESETS",
    "Checkpoint",
    "DenseWeightsError",
    "MLAConfig",
    "RopeScaling",
    "SparseAttentionWarning",
    "StepRecord",
    "WeightRecipe",
    "expected_shapes",
]
