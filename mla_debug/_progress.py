"""Progress for long work that reads well in a terminal, a notebook and a log file alike.

A tqdm bar redraws itself with carriage returns; in a log file (stderr redirected, a job runner, CI) the
redraws are not erased but concatenated into one ever longer line. So a bar is drawn only where it can
redraw: a terminal or a notebook. Elsewhere a requested progress report becomes a few plain lines - one
when the work starts, at most one every ``log_every_s`` seconds, one when it ends.

    for key in progress(shapes, desc="synthetic weights", unit="module", enabled=True):
        ...
    with progress(total=8, desc="triage") as bar:
        bar.update()
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

LOG_EVERY_S = 30.0


def in_notebook() -> bool:
    """Whether this runs inside a Jupyter kernel (where tqdm draws a widget, not text)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False  # a kernel has imported IPython long before any work starts
    shell = ipython.get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress(
    iterable: Iterable | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    enabled: bool | None = None,
    leave: bool = False,
    file: IO[str] | None = None,
    log_every_s: float = LOG_EVERY_S,
    clock: Callable[[], float] = time.monotonic,
):
    """A progress reporter with tqdm's `update`/`close`/iteration/context-manager surface.

    ``enabled``: False shows nothing; None shows a bar in a terminal or notebook and nothing in a log;
    True shows a bar in a terminal or notebook and plain lines (`LogProgress`) in a log. ``file`` is
    where the report goes (default: stderr, looked up at call time so redirections apply).
    """
    stream = sys.stderr if file is None else file
    drawable = in_notebook() or _is_terminal(stream)
    if enabled is False or (enabled is None and not drawable):
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, disable=True)
    if drawable:
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, file=file)
    return LogProgress(iterable, total=total, desc=desc, unit=unit, file=stream, every_s=log_every_s, clock=clock)


class LogProgress:
    """Progress as whole lines: started, then at most one line per `every_s` seconds, then done."""

    def __init__(
        self,
        iterable: Iterable | None = None,
        *,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        file: IO[str],
        every_s: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.file, self.every_s, self.clock = file, every_s, clock
        self.n = 0
        self.postfix = ""
        self.closed = False
        self.start = self.last = clock()
        self._line(f"started ({total} {unit}s)" if total is not None else "started")

    def _line(self, text: str) -> None:
        label = f"{self.desc}: " if self.desc else ""
        suffix = f" [{self.postfix}]" if self.postfix else ""
        print(f"{label}{text}{suffix}", file=self.file, flush=True)

    def _count(self) -> str:
        if self.total:
            return f"{self.n}/{self.total} {self.unit}s ({self.n / self.total:.0%})"
        return f"{self.n} {self.unit}s"

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            self._line(f"{self._count()} after {now - self.start:.0f} s")

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def write(self, text: str) -> None:
        print(text, file=self.file, flush=True)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._line(f"{self._count()} done in {self.clock() - self.start:.1f} s")

    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError(f"{self.desc or 'progress'}: iterate over a progress made from an iterable")
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
