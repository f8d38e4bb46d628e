"""The process's own stdout/stderr (file descriptors 1 and 2), where native code and child processes write.

Two uses, both at the descriptor level because Python's `sys.stdout`/`sys.stderr` never see these bytes:
a spawned rank process inherits descriptors 1 and 2 from the moment it starts (so its output, including
what it prints while re-importing the user's script, can be captured into a file and shown when it
dies), and libkineto inside libtorch writes a status line to descriptor 2 from C++ every time
torch.profiler starts or stops.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# libkineto logs "USDT:<date> <time> <pid>:<tid> <file>.cpp:<line>] profiler_start" (and profiler_stop)
# at its USDT level, which ranks above ERROR: KINETO_LOG_LEVEL can only hide these lines by hiding
# Kineto's errors as well. So only these two lines are dropped; anything else written meanwhile
# (Kineto's warnings and errors, Python warnings) is written back.
_KINETO_START_STOP = re.compile(rb"^USDT:.*\.cpp:\d+\] profiler_(start|stop)\s*$")

# Swapping descriptors 1/2 is process-wide: one thread at a time, so two threads never restore each
# other's copies (re-entrant: nested swaps in one thread unwind in order).
_SWAP = threading.RLock()


def _flush_python_streams() -> None:
    # Python buffers its own writes; flushed first so they land where they were meant to go.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


@contextlib.contextmanager
def _descriptors_to(target_fd: int, fds: tuple[int, ...]) -> Iterator[None]:
    """Point each of `fds` at `target_fd` for the block; restore them afterwards."""
    saved: list[tuple[int, int | None]] = []
    _flush_python_streams()
    with _SWAP:
        try:
            for fd in fds:
                try:
                    copy = os.dup(fd)
                except OSError:  # the descriptor was closed (a daemonised host): nothing to restore
                    copy = None
                saved.append((fd, copy))
                os.dup2(target_fd, fd)
            yield
        finally:
            _flush_python_streams()
            for fd, copy in reversed(saved):
                if copy is None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                else:
                    os.dup2(copy, fd)
                    os.close(copy)


@contextlib.contextmanager
def output_inherited_from(path: str | os.PathLike) -> Iterator[None]:
    """Descriptors 1 and 2 append to `path` for the block, so a process started inside it writes there.

    Meant to wrap only `Process.start()`: anything else this process writes to descriptors 1/2 meanwhile
    (another thread's print) lands in the file too.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with _descriptors_to(fd, (1, 2)):
            yield
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def drop_kineto_start_stop(data: bytes) -> bytes:
    """`data` without libkineto's 'profiler_start' / 'profiler_stop' lines."""
    lines = data.splitlines(keepends=True)
    return b"".join(line for line in lines if not _KINETO_START_STOP.match(line))


@contextlib.contextmanager
def without_kineto_start_stop() -> Iterator[None]:
    """Run the block (a profiler's start or stop) with descriptor 2 captured, then write back all of it
    but libkineto's start/stop lines. Errors stay visible, only later (when the block ends)."""
    with tempfile.TemporaryFile() as sink:
        try:
            with _descriptors_to(sink.fileno(), (2,)):
                yield
        finally:
            sink.seek(0)
            kept = drop_kineto_start_stop(sink.read())
            if kept:
                with contextlib.suppress(OSError):
                    _write_all(2, kept)


@contextlib.contextmanager
def quiet_profiler(profiler: Any) -> Iterator[Any]:
    """`with quiet_profiler(torch.profiler.profile(...)) as prof:` - the profiler without Kineto's
    start/stop lines; the block itself runs with descriptor 2 untouched."""
    with without_kineto_start_stop():
        entered = profiler.__enter__()
    try:
        yield entered
    except BaseException:
        with without_kineto_start_stop():
            handled = profiler.__exit__(*sys.exc_info())
        if not handled:
            raise
    else:
        with without_kineto_start_stop():
            profiler.__exit__(None, None, None)


def read_excerpt(path: Path, head: int = 8, tail: int = 30, max_chars: int = 8000) -> str:
    """A log file's first `head` and last `tail` lines ('' when it is missing or empty).

    Both ends, because a dying process's first lines say what it was doing (a re-imported script's own
    prints) and its last lines how it died (the traceback).
    """
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").rstrip().splitlines()
    if len(lines) > head + tail:
        left_out = len(lines) - head - tail
        lines = [*lines[:head], f"... ({left_out} lines left out) ...", *lines[-tail:]]
    text = "\n".join(lines)
    if len(text) > max_chars:
        text = "...\n" + text[-max_chars:]
    return text
