"""`md.profile`: record a torch.profiler trace of a layer run (or any code) into a fresh run folder.

    with md.profile(out_dir="profiles", metadata={"note": "before the fix"}) as session:
        layer.run(hidden, positions)
    result, session = md.profile(md.run_layer, cfg, ckpt, hidden, positions, tp_size=4)

A run folder ``<out_dir>/<run_id>/`` holds ``<worker>.<ns>.pt.trace.json[.gz]`` (the layout of
torch.profiler.tensorboard_trace_handler, so ``tensorboard --logdir <out_dir>`` with torch-tb-profiler
lists the run; Perfetto UI and chrome://tracing open the files) and ``mla_debug_meta.json``. A run
folder is never reused: the default run id is ``<timestamp>-<short uuid>``, and an explicit run id
that already exists raises FileExistsError.

A session takes part in the runs made while it is open through the step loop's observer contract
(`mla_debug.parallel.observe`), not by knowing which function it wraps: it is a run listener, so every
run carries its step observers (a ``mla.<step>[<kernel>]`` range per step; for the distributed
executor, a trace written by each rank process, ``rank<r>.<ns>.pt.trace.json.gz``), and every finished
run (a LayerRun, a TriageResult) announces itself, which is where the metadata's model, platform,
scenario, tp, mode, tokens and executor come from. When every run announced was distributed, this
process only waited on its ranks and its own trace is not written.
"""

from __future__ import annotations

import datetime as _dt
import gzip as _gzip
import inspect
import json
import os
import platform as _platform
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .._files import create_folder, fresh_folder, publish_file, write_atomically
from .._stdio import without_kineto_start_stop
from ..parallel.observe import RunDescription, StepObserver, listening
from .chrome import is_trace_file
from .observers import RankTraces

META_NAME = "mla_debug_meta.json"
META_KEYS = ("model", "platform", "scenario", "tp", "mode", "tokens", "executor")


def _new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine() or "cpu"


def described(descriptions: list[dict]) -> dict:
    """The metadata keys of the runs a session saw: each key's value when every run agrees, else the
    distinct values in order of appearance; None when no run was announced."""
    found: dict[str, Any] = {}
    for key in META_KEYS:
        values: list = []
        for description in descriptions:
            if description[key] not in values:
                values.append(description[key])
        found[key] = None if not values else values[0] if len(values) == 1 else values
    return found


class ProfileSession:
    """One profiled run: its folder, trace files and metadata. A context manager, used once.

    >>> with md.profile(metadata={"note": "baseline"}) as session:
    ...     md.run_layer(cfg, ckpt, hidden, positions, tp_size=2)
    >>> session.folder, session.trace_paths, session.trace().per_step()

    `metadata` may be edited inside the ``with`` block; it is written to ``mla_debug_meta.json`` on exit,
    over what the runs made inside reported (`runs`: the description of each run announced).

    While open, the session is a run listener (`mla_debug.parallel.observe.RunListener`): it gives
    every run its step observers and collects the runs that announce themselves.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike = "profiles",
        run_id: str | None = None,
        metadata: dict | None = None,
        gzip: bool = True,
        record_shapes: bool = True,
        with_cuda: bool | str = "auto",
        function: str | None = None,
    ) -> None:
        if with_cuda not in ("auto", True, False):
            raise ValueError(f"with_cuda={with_cuda!r} must be 'auto', True or False")
        if with_cuda is True and not torch.cuda.is_available():
            raise ValueError("with_cuda=True, but torch sees no CUDA/ROCm GPU; use 'auto' or False")
        if run_id is not None:
            run_id = str(run_id)
            if not run_id or run_id in (".", "..") or os.sep in run_id or (os.altsep and os.altsep in run_id):
                raise ValueError(f"run_id {run_id!r} must be a plain folder name (no path separators)")
        self.out_dir = Path(out_dir)
        self._explicit_id = run_id is not None
        self.run_id = run_id or _new_run_id()
        self.folder = self.out_dir / self.run_id
        if self._explicit_id and self.folder.exists():
            raise FileExistsError(
                f"run folder {self.folder} already exists; pick another run_id (runs are never reused)"
            )
        self.metadata: dict = dict(metadata or {})
        self.gzip = gzip
        self.record_shapes = record_shapes
        self.with_cuda = torch.cuda.is_available() if with_cuda == "auto" else bool(with_cuda)
        self.function = function
        self.runs: list[RunDescription] = []  # every run announced while the session was open
        self.trace_paths: list[Path] = []
        self.meta_path: Path | None = None
        self._profiler: torch.profiler.profile | None = None
        self._state = "new"
        self._started = 0.0
        self._listening = None

    def __repr__(self) -> str:
        return f"ProfileSession({self.folder}, {len(self.trace_paths)} trace file(s), {self._state})"

    # -- the context manager -------------------------------------------------------------------------
    def __enter__(self) -> ProfileSession:
        if self._state != "new":
            raise RuntimeError(f"this profile session ({self.folder}) was already used; start a new md.profile()")
        self._reserve_folder()
        self._state = "running"
        self._started = time.perf_counter()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.with_cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities, record_shapes=self.record_shapes, on_trace_ready=self._write_trace
        )
        # libkineto prints "USDT: ... profiler_start" (and _stop) to the C-level stderr on every start
        # and stop, at a level above ERROR, so no log level hides it alone; filtered here instead.
        with without_kineto_start_stop():
            self._profiler.__enter__()
        self._listening = listening(self)
        self._listening.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self._listening.__exit__(exc_type, exc, tb)
            with without_kineto_start_stop():
                self._profiler.__exit__(exc_type, exc, tb)  # stops, then calls _write_trace
        finally:
            self._state = "done"
            if not self.gzip:
                self._gunzip_rank_traces()
            self.trace_paths = sorted(p for p in self.folder.iterdir() if is_trace_file(p) and p.name != META_NAME)
            self._write_meta(exc)
            if exc is not None and hasattr(exc, "add_note"):
                exc.add_note(f"mla_debug.profile: the trace so far is in {self.folder}")
        return False

    def _reserve_folder(self) -> None:
        if self._explicit_id:
            try:
                create_folder(self.folder)
            except FileExistsError:
                raise FileExistsError(
                    f"run folder {self.folder} already exists; pick another run_id (runs are never reused)"
                ) from None
            return
        self.folder = fresh_folder(self.folder)
        self.run_id = self.folder.name

    # -- the run listener ------------------------------------------------------------------------------
    def step_observers(self, executor: str) -> list[StepObserver]:
        """For the distributed executor, each rank's own trace into the run folder (every run carries the
        step ranges already)."""
        if executor == "distributed":
            return [RankTraces(str(self.folder), self.record_shapes, self.with_cuda)]
        return []

    def run_done(self, result) -> None:
        description = getattr(result, "description", None)
        if description is not None:
            self.runs.append(description)

    def _only_ranks_traced(self) -> bool:
        """Every run announced was distributed: this process only waited, and each rank traced itself."""
        return bool(self.runs) and all(run.executor == "distributed" for run in self.runs)

    def _write_trace(self, prof: torch.profiler.profile) -> None:
        """on_trace_ready: the Chrome trace, named as tensorboard_trace_handler names it, written atomically
        (not at all when the ranks of distributed runs wrote every trace worth having)."""
        if self._only_ranks_traced():
            return
        worker = f"{socket.gethostname()}_{os.getpid()}"
        suffix = ".pt.trace.json" + (".gz" if self.gzip else "")
        name = f"{worker}.{time.time_ns()}{suffix}"
        plain = self.folder / f".{name}.{os.getpid()}.tmp.json"
        prof.export_chrome_trace(str(plain))
        try:
            if self.gzip:
                packed = self.folder / f".{name}.{os.getpid()}.tmp.gz"
                # Level 6: within a few percent of level 9's size, several times faster on big traces.
                with open(plain, "rb") as src, _gzip.open(packed, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                publish_file(packed, self.folder / name, suffix)
            else:
                publish_file(plain, self.folder / name, suffix)
        finally:
            plain.unlink(missing_ok=True)

    def _gunzip_rank_traces(self) -> None:
        """Distributed ranks always write gzip; honour gzip=False by unpacking them (atomically)."""
        for packed in self.folder.glob("*.pt.trace.json.gz"):
            target = packed.with_name(packed.name[: -len(".gz")])
            tmp = packed.with_name(f".{target.name}.tmp")
            try:
                with _gzip.open(packed, "rb") as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except (OSError, EOFError):
                tmp.unlink(missing_ok=True)
                continue  # a rank that died mid-write: leave its file for load_trace to report
            publish_file(tmp, target, ".pt.trace.json")
            packed.unlink()

    def _write_meta(self, exc: BaseException | None) -> None:
        meta = {
            **described([run.to_dict() for run in self.runs]),
            "function": self.function,
            "run_id": self.run_id,
            "timestamp": _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds"),
            "elapsed_s": round(time.perf_counter() - self._started, 3),
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else _cpu_name(),
            "cuda_activity": bool(self.with_cuda),
            "hostname": socket.gethostname(),
            "trace_files": [p.name for p in self.trace_paths],
            "error": None if exc is None else f"{type(exc).__name__}: {exc}",
        }
        meta.update(self.metadata)  # the caller's words win over what was derived
        self.metadata = meta
        self.meta_path = write_atomically(self.folder / META_NAME, json.dumps(meta, indent=2, default=str) + "\n")

    # -- results ---------------------------------------------------------------------------------------
    def trace(self):
        """The recorded run as a `Trace` (load_trace of the run folder)."""
        if self._state != "done":
            raise RuntimeError("the profile is still running; call trace() after the `with` block")
        from .trace import load_trace

        return load_trace(self.folder)


def profile(fn: Callable | None = None, *args, **kwargs):
    """Profile `fn(*args, **kwargs)` (returns ``(result, session)``), or, without fn, a ``with`` block.

    >>> run, session = md.profile(md.run_layer, cfg, ckpt, hidden, positions, tp_size=4, mode="decode")
    >>> with md.profile(out_dir="profiles", metadata={"scenario": "vllm-pr51692"}) as session: ...

    The keywords `ProfileSession` takes (out_dir, run_id, metadata, gzip, record_shapes, with_cuda) are
    the session's; every other argument is fn's. torch.profiler records CPU ops (and CUDA/ROCm kernels
    when torch sees a GPU and with_cuda="auto") with input shapes (record_shapes) into
    ``<out_dir>/<run_id>/``, a fresh folder. A distributed run inside makes each rank write its own trace
    (always gzipped by the ranks; unpacked afterwards when gzip=False). The metadata file records model,
    platform, scenario, tp, mode, tokens and executor as the runs made inside report them (a LayerRun's,
    or a TriageResult's for ``md.profile(md.triage, ...)``; lists where several runs differ), the function
    called, plus `metadata` (which wins), torch and Python versions, the device name and a timestamp.
    """
    options = {name: kwargs.pop(name) for name in SESSION_OPTIONS if name in kwargs}
    if fn is None:
        if args or kwargs:
            given = [*map(repr, args), *kwargs]
            raise TypeError(
                f"md.profile() got arguments for a function ({', '.join(given)}) but no function to call; "
                f"the session's own options are {', '.join(SESSION_OPTIONS)}"
            )
        return ProfileSession(**options)
    if not callable(fn):
        raise TypeError(f"md.profile: {fn!r} is not callable (pass the function first, then its arguments)")
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    session = ProfileSession(**options, function=name)
    with session:
        result = fn(*args, **kwargs)
    return result, session


# profile()'s options are ProfileSession's, less `function` (filled in with fn's name): read from the
# class, so the two cannot drift apart, and shown in profile's signature (help, Jupyter).
_SESSION_PARAMETERS = [p for p in inspect.signature(ProfileSession).parameters.values() if p.name != "function"]
SESSION_OPTIONS = tuple(p.name for p in _SESSION_PARAMETERS)
profile.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("fn", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation="Callable | None"),
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in _SESSION_PARAMETERS),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)
