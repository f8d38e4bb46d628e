"""Timing traces: capture with torch.profiler, load Chrome traces, per-step and per-kernel tables, diffs.

    session = md.profile(...)            # capture.py: a fresh run folder per profile
    trace = md.load_trace(folder)        # trace.py: events attributed to mla.<step>[kernel] ranges
    diff = md.compare_traces(a, b)       # diff.py: steps and kernels side by side

Nothing here imports pandas at import time (the tables import it when built), so `import mla_debug`
stays light.
"""

from __future__ import annotations

from .diff import TraceDiff, compare_traces
from .session import META_NAME, ProfileSession, profile
from .trace import Trace, TraceWarning, load_trace, parse_step_name

__all__ = [
    "META_NAME",
    "ProfileSession",
    "Trace",
    "TraceDiff",
    "TraceWarning",
    "compare_traces",
    "load_trace",
    "parse_step_name",
    "profile",
]
