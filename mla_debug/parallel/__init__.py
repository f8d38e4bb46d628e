"""TP sharding rules, the one step loop with hooks, its in-process and torch.distributed executors,
activation patching, and the run entry points."""

from .distributed import RankError
from .hooks import StepHook
from .layer_run import LayerRun
from .observe import RunDescription, RunListener, StepObserver
from .patch import Patch
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
    "Patch",
    "RankError",
    "RunDescription",
    "RunListener",
    "StepHook",
    "StepObserver",
    "linear_specs",
    "run_layer",
]
