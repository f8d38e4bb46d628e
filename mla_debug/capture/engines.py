"""Recipes that run the generic capture inside each rank of a serving engine (untested against the
engines themselves: written against vLLM 0.33.0 and SGLang 0.5.23 as released, read from their wheels).

They are thin adapters: each finds the rank's model, rank and TP size the way the engine exposes them
and hands them to `LayerCapture` with the engine's name map. Both need the engine's eager path (module
calls run Python hooks; CUDA graphs and compiled graphs do not): vLLM with ``enforce_eager=True``,
SGLang with ``disable_cuda_graph=True``.

vLLM 0.33.0 - `LLM.collective_rpc(method, timeout=None, args=(), kwargs=None)` (entrypoints/llm.py) runs
a callable on every worker, passing the worker as its first argument. The worker (v1/worker/gpu_worker.py
`Worker`, a `WorkerBase`) holds `rank`, `parallel_config` and `model_runner`, whose `get_model()`
(v1/worker/gpu_model_runner.py) returns the unwrapped model. A capture stays open between two calls:

    from mla_debug.capture.engines import vllm_start_capture, vllm_finish_capture
    llm = LLM(model, tensor_parallel_size=4, enforce_eager=True)
    llm.collective_rpc(vllm_start_capture, kwargs={"out": "captures/tp4", "layer": 3, "tokens": list(range(16))})
    llm.generate(prompts, SamplingParams(max_tokens=1))
    folders = llm.collective_rpc(vllm_finish_capture)

SGLang 0.5.23 - `Engine.collective_rpc(method: str, **kwargs)` (srt/entrypoints/engine.py) only calls
methods the Scheduler already has, so the recipe goes through SGLang's forward hooks instead: the server
argument ``forward_hooks`` (srt/arg_groups/fields/observability.py) lists specs that
srt/model_executor/hook_manager.py `register_forward_hooks` resolves (``"module:factory"``), calls with
the spec's config and registers as forward hooks on the matching modules, after loading and CUDA-graph
capture. The hook opens a capture on the first call of the attention module it sees (its weights are
the loaded ones by then), records the next call, and writes the rank's folder when that call returns:

    from mla_debug.capture.engines import sglang_forward_hooks
    engine = sglang.Engine(model_path=..., tp_size=4, disable_cuda_graph=True,
                           forward_hooks=sglang_forward_hooks("captures/tp4", 3, model_path, tokens=list(range(16))))
    engine.generate(prompt, {"max_new_tokens": 2})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import MLAConfig
from .recorder import LayerCapture

# The worker attribute that holds an open capture between vllm_start_capture and vllm_finish_capture.
VLLM_WORKER_ATTR = "_mla_debug_capture"
VLLM_MAP, SGLANG_MAP = "vllm-0.33", "sglang-0.5.23"
SGLANG_HOOK_FACTORY = "mla_debug.capture.engines:sglang_hook_factory"


def _vllm_rank(worker: Any) -> tuple[int, int]:
    parallel = worker.parallel_config
    if getattr(parallel, "pipeline_parallel_size", 1) != 1:
        raise ValueError(
            f"vllm_start_capture: pipeline_parallel_size={parallel.pipeline_parallel_size}; the recipe knows "
            "tensor parallelism only (the layer lives on one pipeline stage)"
        )
    tp_size = int(parallel.tensor_parallel_size)
    return int(worker.rank) % tp_size, tp_size


def vllm_start_capture(worker: Any, out: str, layer: int, **options: Any) -> str:
    """`LLM.collective_rpc` target: open a capture of `layer` on this worker's model; returns the rank
    folder it will write. Options are `LayerCapture`'s (tokens, positions, call, mode, note, ...)."""
    if getattr(worker, VLLM_WORKER_ATTR, None) is not None:
        raise RuntimeError("vllm_start_capture: a capture is already open on this worker; finish it first")
    rank, tp_size = _vllm_rank(worker)
    options.setdefault("names", VLLM_MAP)
    model = worker.model_runner.get_model()
    cap = LayerCapture(model, out, layer=layer, rank=rank, tp_size=tp_size, **options)
    cap.__enter__()
    setattr(worker, VLLM_WORKER_ATTR, cap)
    return str(cap.folder)


def vllm_finish_capture(worker: Any) -> str:
    """`LLM.collective_rpc` target: close this worker's capture and write its folder; returns it."""
    cap = getattr(worker, VLLM_WORKER_ATTR, None)
    if cap is None:
        raise RuntimeError("vllm_finish_capture: no capture is open on this worker (call vllm_start_capture first)")
    setattr(worker, VLLM_WORKER_ATTR, None)
    cap.__exit__(None, None, None)
    return str(cap.path)


def sglang_forward_hooks(out: str, layer: int, config: str | dict, **options: Any) -> list[dict[str, Any]]:
    """The ``forward_hooks`` server argument that captures `layer` on every rank. `config` is the model's
    Hugging Face config (its folder, its config.json, or the parsed dict): SGLang's attention module
    does not keep it. Options must be JSON-serializable: tokens, positions, mode, note, call,
    row_output_reduced."""
    source = config if isinstance(config, dict) else str(config)
    return [
        {
            "name": "mla_debug-capture",
            "target_modules": [f"model.layers.{layer}.self_attn"],
            "hook_factory": SGLANG_HOOK_FACTORY,
            "config": {"out": str(out), "layer": int(layer), "hf_config": source, **options},
        }
    ]


def _sglang_rank() -> tuple[int, int]:
    from sglang.srt.distributed.parallel_state import (
        get_tensor_model_parallel_rank,
        get_tensor_model_parallel_world_size,
    )

    return int(get_tensor_model_parallel_rank()), int(get_tensor_model_parallel_world_size())


def sglang_hook_factory(config: dict[str, Any]) -> Callable:
    """What SGLang's hook manager calls with a spec's config: a forward hook that opens the capture on
    the first call it sees and lets the capture write itself after the call it records."""
    options = dict(config)
    out, layer = options.pop("out"), options.pop("layer")
    cfg = MLAConfig.from_hf(options.pop("hf_config"))
    options.setdefault("names", SGLANG_MAP)
    state: dict[str, LayerCapture] = {}

    def hook(module, args, output):
        if "capture" in state:
            return None
        rank, tp_size = _sglang_rank()
        cap = LayerCapture(module, out, layer=layer, cfg=cfg, rank=rank, tp_size=tp_size, close_after=True, **options)
        cap.__enter__()
        state["capture"] = cap
        return None

    return hook
