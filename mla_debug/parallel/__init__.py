"""TP sharding rules and executors (in-process lock step, torch.distributed), and the run entry points."""

from .distributed import RankError
from .layer_run import LayerRun
from .run import EXECUTORS, MODES, MLALayer, check_device, run_layer
from .sharding import COLUMN, REPLICATED, ROW, LinearSpec, linear_specs

__all__ = [
    "check_device",
    "COLUMN",
    "EXECUTORS",
    "MODES",
    "REPLICATED",
    "ROW",
    "LayerRun",
    "LinearSpec",
    "MLALayer",
    "RankError",
    "linear_specs",
    "run_layer",
]
