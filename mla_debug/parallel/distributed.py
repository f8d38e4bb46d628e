"""torch.distributed executor: one process per rank (gloo on CPU, nccl when every rank has a GPU).

Each process builds and runs its own rank; the all-reduce is an all-gather followed by an fp32 sum in
rank order - the same arithmetic as the in-process executor, so both give bitwise identical runs.
Every rank's records are gathered to rank 0 and sent back. A rank that raises ends the run with that
rank's error; a run that outlives `timeout` is killed; no process is left behind either way.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue as queue_module
import socket
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..model.program import step_label
from .gather import sum_in_rank_order


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, world: int, port: int, payload: dict, results, threads: int | None) -> None:
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if threads:
            torch.set_num_threads(threads)
        use_cuda = payload["device"] == "cuda"
        device = torch.device(f"cuda:{rank}" if use_cuda else "cpu")
        if use_cuda:
            torch.cuda.set_device(device)
        dist.init_process_group(
            "nccl" if use_cuda else "gloo", rank=rank, world_size=world, timeout=timedelta(seconds=payload["timeout"])
        )
        from .build import LayerBuilder

        with _rank_profiler(payload.get("profile_dir"), rank, use_cuda):
            builder = LayerBuilder(
                payload["cfg"],
                payload["ckpt"].to(device),
                world,
                payload["platform"],
                payload["scenario"],
                payload["dtype"],
            )
            layer = builder.rank_layer(rank)
            if payload.get("fail_rank") == rank:  # fault injection, used to test the error path
                raise RuntimeError(f"injected failure on rank {rank}")
            state = layer.begin(payload["hidden"].to(device), payload["positions"].to(device))
            records = []
            for step in layer.steps(payload["mode"]):
                with torch.profiler.record_function(step_label(layer, step.name)):
                    if step.collective:
                        partial = state["partial"].to(torch.float32).contiguous()
                        parts = [torch.empty_like(partial) for _ in range(world)]
                        dist.all_gather(parts, partial)
                        records.append(layer.finish_all_reduce(state, sum_in_rank_order(parts)))
                    else:
                        records.append(step.run(state))
        records = [_to_cpu(record) for record in records]
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(records, gathered, dst=0)
        if rank == 0:
            report = {
                "records": gathered,
                "kernels": {name: describe_kernel(linear) for name, linear in layer.linears.items()},
                "events": {name: list(linear.events) for name, linear in layer.linears.items()},
            }
            # Plain pickle bytes, not torch's shared-memory tensor handles: those die with this process.
            results.put(("ok", rank, pickle.dumps(report)))
        dist.destroy_process_group()
    except BaseException:  # report every failure, including KeyboardInterrupt in a child
        results.put(("error", rank, traceback.format_exc()))


def _rank_profiler(folder: str | None, rank: int, use_cuda: bool):
    """A profiler that writes this rank's trace into `folder` on exit, or a no-op without a folder.

    Each rank profiles itself (the parent only waits), so a distributed run gives one trace per rank:
    ``rank<r>.<ns>.pt.trace.json.gz``, the layout tensorboard's profiler plugin lists as one run.
    """
    if not folder:
        return contextlib.nullcontext()
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_cuda else [])
    handler = tensorboard_trace_handler(folder, worker_name=f"rank{rank}", use_gzip=True)
    return profile(activities=activities, record_shapes=True, on_trace_ready=handler)


def _to_cpu(record):
    """A record whose tensors live on the CPU, so rank 0 and the parent can read it."""
    record.output = record.output.cpu() if record.output is not None else None
    record.extras = {key: t.cpu() for key, t in record.extras.items()}
    return record


def describe_kernel(linear) -> str:
    """'kernel: reason' of a quantized linear (its selection reason starts with the kernel name)."""
    block = getattr(linear, "block", None)
    return block.kernel_reason if block is not None else "dense (unquantized)"


def run_ranks_distributed(payload: dict, world: int, timeout: float = 300.0, threads: int | None = 1) -> dict:
    """Run `world` rank processes; returns rank 0's report: per-rank record lists, kernels, events."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    payload = {**payload, "timeout": timeout}
    procs = [
        ctx.Process(target=_worker, args=(r, world, port, payload, results, threads), daemon=True) for r in range(world)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"distributed run of {world} ranks did not finish within {timeout:.0f} s")
            try:
                status, rank, body = results.get(timeout=min(remaining, 1.0))
            except queue_module.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"rank {procs.index(dead[0])} exited with code {dead[0].exitcode} before reporting"
                    ) from None
                continue
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{body}")
            return pickle.loads(body)
    finally:
        for proc in procs:
            proc.join(timeout=5)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
