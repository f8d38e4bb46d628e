"""TP sharding rules, the one step loop with hooks, its executors (in-process, torch.distributed, and the
cached one that reuses loaded linears and GEMM results across many runs of one layer), activation
patching, and the run entry points."""

from .cached import CachedExecutor, CachedRun
from .distributed import RankError
from .hooks import StepHook
from .layer_run import LayerRun
from .observe import RunDescription, RunListener, StepObserver
from .patch import Patch
from .run import EXECUTORS, MODES, MLALayer, check_device, run_layer
from .sharding import COLUMN, REPLICATED, ROW, LinearSpec, linear_specs

__all__ = [
    "CachedExecutor",
    "CachedRun",
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
