"""What the profiler adds to a distributed layer run: a trace written by each rank process itself. A step
observer (`mla_debug.parallel.observe`), handed to runs by an active `ProfileSession`; a plain picklable
object, since the distributed executor sends it to its rank processes. (The per-step ranges every run
carries are `parallel.observe.ProfilerRanges`.)
"""

from __future__ import annotations

import torch

from .._stdio import quiet_profiler
from ..parallel.observe import StepObserver


class RankTraces(StepObserver):
    """Each rank process of a distributed run profiles itself (the parent only waits) and writes
    ``rank<r>.<ns>.pt.trace.json.gz`` into `folder`: the layout tensorboard's profiler plugin lists
    as one run. CUDA activity is recorded on ranks that run on a GPU when `with_cuda`."""

    def __init__(self, folder: str, record_shapes: bool = True, with_cuda: bool = True) -> None:
        self.folder, self.record_shapes, self.with_cuda = str(folder), record_shapes, with_cuda

    def around_rank(self, rank: int, device: torch.device):
        from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

        activities = [ProfilerActivity.CPU]
        if self.with_cuda and device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        handler = tensorboard_trace_handler(self.folder, worker_name=f"rank{rank}", use_gzip=True)
        prof = profile(activities=activities, record_shapes=self.record_shapes, on_trace_ready=handler)
        return quiet_profiler(prof)

    def __repr__(self) -> str:
        return f"RankTraces({self.folder!r})"
