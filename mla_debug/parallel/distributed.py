"""torch.distributed executor: one process per rank (gloo on CPU, nccl when every rank has a GPU).

Each process builds its own rank and runs it through the one step loop (`parallel.loop`); the
all-reduce is an all-gather followed by an fp32 sum in rank order - the same arithmetic as the
in-process executor, so both give bitwise identical runs. Hooks and step observers (a profiler's
ranges, each rank's own trace: see `parallel.observe`) travel to the ranks by pickle. Every rank's records are gathered to rank 0 and sent back. A rank that raises ends the run with that
rank's error; a rank that dies without reporting (a crash, os._exit, a script re-imported without a
`__main__` guard) ends it with its exit code and its own output; a run that outlives `timeout` is
killed; no process is left behind either way. Each rank's stdout and stderr go to a file of its own
(ranks start with descriptors 1 and 2 pointing there), shown in the error when it fails and passed on
to this process's stderr, prefixed with the rank, when the run succeeds.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue as queue_module
import signal
import socket
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .._stdio import output_inherited_from, read_excerpt
from .gather import sum_in_rank_order
from .layer_run import events_of, kernels_of
from .loop import run_steps

# What multiprocessing raises in a spawned child that re-imports a script whose top level starts
# processes (multiprocessing/spawn.py, _check_not_importing_main).
_NO_MAIN_GUARD = "An attempt has been made to start a new process before the"

MAIN_GUARD_EXAMPLE = """\
    import mla_debug as md

    def main():
        run = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2, executor="distributed")
        print(run.summary())

    if __name__ == "__main__":
        main()"""


class RankError(RuntimeError):
    """A rank of a distributed run failed. `rank`, `exitcode` (None while it still ran, negative: the
    signal that killed it), `cause` ("raised", "died" or "no-main-guard") and `output` (the end of its
    stdout/stderr) say which, how and what it printed."""

    def __init__(self, message: str, rank: int, cause: str, exitcode: int | None = None, output: str = "") -> None:
        super().__init__(message)
        self.rank, self.cause, self.exitcode, self.output = rank, cause, exitcode, output


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

        observers = payload.get("observers", ())
        with contextlib.ExitStack() as around:
            for observer in observers:
                around.enter_context(observer.around_rank(rank, device))
            builder = LayerBuilder(
                payload["cfg"],
                payload["ckpt"].to(device),
                world,
                payload["platform"],
                payload["scenario"],
                payload["dtype"],
            )
            layer = builder.rank_layer(rank)
            steps = run_steps(
                [layer],
                payload["hidden"].to(device),
                payload["positions"].to(device),
                payload["mode"],
                partial(_all_gather_sum, world),
                payload.get("hooks"),
                observers,
            )
            records = [record for _, (record,) in steps]
        records = [_to_cpu(record) for record in records]
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(records, gathered, dst=0)
        if rank == 0:
            report = {"records": gathered, "kernels": kernels_of(layer), "events": events_of(layer)}
            # Plain pickle bytes, not torch's shared-memory tensor handles: those die with this process.
            results.put(("ok", rank, pickle.dumps(report)))
        dist.destroy_process_group()
    except BaseException:  # report every failure, including KeyboardInterrupt in a child
        results.put(("error", rank, traceback.format_exc()))


def _all_gather_sum(world: int, partials: list[torch.Tensor]) -> torch.Tensor:
    """The all-reduce of one rank process: all-gather every rank's partial, then the fp32 sum in rank
    order that the in-process executor computes (so both are bitwise identical)."""
    (partial_sum,) = partials
    partial_sum = partial_sum.to(torch.float32).contiguous()
    parts = [torch.empty_like(partial_sum) for _ in range(world)]
    dist.all_gather(parts, partial_sum)
    return sum_in_rank_order(parts)


def _to_cpu(record):
    """A record whose tensors live on the CPU, so rank 0 and the parent can read it."""
    record.output = record.output.cpu() if record.output is not None else None
    record.extras = {key: t.cpu() for key, t in record.extras.items()}
    return record


def _how_it_ended(exitcode: int) -> str:
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (SIGKILL: often the kernel's out-of-memory killer)" if exitcode == -signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode}"


def _script_name() -> str:
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    where = f" ({path})" if path else ""
    return f"the script that called run_layer(executor='distributed'){where}"


def _died(rank: int, exitcode: int, output: str, others: list[str]) -> RankError:
    """The error for a rank that ended without reporting, with its own output."""
    shown = output or "(it wrote nothing to stdout or stderr)"
    also = f" ({'; '.join(others)})" if others else ""
    if _NO_MAIN_GUARD in output:
        message = (
            f"rank {rank} {_how_it_ended(exitcode)} before reporting{also}: {_script_name()} has no "
            "`if __name__ == '__main__':` guard. Ranks start with spawn and re-import that script, so its "
            "top level ran again in every rank and tried to start ranks of its own. Put the calls under the "
            f"guard:\n\n{MAIN_GUARD_EXAMPLE}\n\nrank {rank}'s output:\n{shown}"
        )
        return RankError(message, rank, "no-main-guard", exitcode, output)
    message = f"rank {rank} {_how_it_ended(exitcode)} before reporting{also}; its output:\n{shown}"
    return RankError(message, rank, "died", exitcode, output)


def _relay(logs: list[Path]) -> None:
    """Pass what each rank printed on to this process's stderr, one prefixed line at a time."""
    if sys.stderr is None:  # no console at all (pythonw): nowhere to pass it on to
        return
    for rank, log in enumerate(logs):
        text = read_excerpt(log, head=100, tail=100, max_chars=20000)
        if text:
            sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))


def run_ranks_distributed(payload: dict, world: int, timeout: float = 300.0, threads: int | None = 1) -> dict:
    """Run `world` rank processes; returns rank 0's report: per-rank record lists, kernels, events.

    `payload` holds what every rank builds and runs: cfg, ckpt, hidden, positions (validated by the
    caller), mode, platform, scenario, dtype, device, and optionally hooks (a hook table) and observers
    (each entered around the rank's work and around every step), all sent by pickle.

    Raises RankError when a rank fails (its traceback, or its exit code and output), TimeoutError past
    `timeout` (with what each rank printed).
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    payload = {**payload, "timeout": timeout}
    procs = [
        ctx.Process(target=_worker, args=(r, world, port, payload, results, threads), daemon=True) for r in range(world)
    ]
    with tempfile.TemporaryDirectory(prefix="mla_debug-ranks-") as folder:
        logs = [Path(folder) / f"rank{r}.log" for r in range(world)]
        report = None
        try:
            for proc, log in zip(procs, logs):
                with output_inherited_from(log):
                    proc.start()
            report = _wait(procs, results, logs, world, timeout)
        finally:
            # After a success the ranks are tearing down their process group: give them a moment. After
            # a failure the survivors wait on a collective that will never complete: end them now.
            for proc in procs:
                if proc.pid is not None and report is not None:
                    proc.join(timeout=5)
            for proc in procs:
                if proc.is_alive():
                    proc.kill()
                    proc.join()
        _relay(logs)
        return report


def _wait(procs, results, logs: list[Path], world: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            printed = [f"rank {r}'s output:\n{text}" for r, log in enumerate(logs) if (text := read_excerpt(log))]
            raise TimeoutError(
                f"distributed run of {world} ranks did not finish within {timeout:.0f} s"
                + ("".join(f"\n{part}" for part in printed))
            )
        try:
            status, rank, body = results.get(timeout=min(remaining, 1.0))
        except queue_module.Empty:
            dead = _dead(procs)
            if dead:
                first, exitcode = dead[0]
                others = [f"rank {r} {_how_it_ended(code)}" for r, code in dead[1:]]
                raise _died(first, exitcode, read_excerpt(logs[first]), others) from None
            continue
        if status == "error":
            # A rank that crashes takes its sockets with it, so the others fail in their next collective
            # and report that first; the crash is the cause worth showing. Its exit is seen at once
            # (the peers noticed it because the process ended); the wait only covers the bookkeeping.
            dead = _dead(procs, wait=1.0)
            if dead:
                first, exitcode = dead[0]
                last_line = body.strip().splitlines()[-1] if body.strip() else "an error"
                others = [f"rank {r} {_how_it_ended(code)}" for r, code in dead[1:]]
                others.append(f"then rank {rank} failed: {last_line}")
                raise _died(first, exitcode, read_excerpt(logs[first]), others) from None
            output = read_excerpt(logs[rank])
            printed = f"\nrank {rank}'s output:\n{output}" if output else ""
            raise RankError(f"rank {rank} failed:\n{body}{printed}", rank, "raised", None, output)
        return pickle.loads(body)


def _dead(procs, wait: float = 0.0) -> list[tuple[int, int]]:
    """(rank, exit code) of the ranks that ended with a non-zero code (a rank that reported its error
    exits with 0), waiting up to `wait` seconds for one to show up."""
    deadline = time.monotonic() + wait
    while True:
        dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if dead or time.monotonic() >= deadline:
            return dead
        time.sleep(0.05)
