"""Read Chrome trace JSON (what torch.profiler / Kineto, Perfetto and most tracers export) into columns.

One file becomes one `RawTrace`: parallel lists and numpy arrays, never a dict per event, so a 100 MB
trace stays well inside memory once the parsed JSON is dropped. Complete events (``ph: "X"``) are taken
as they are; ``B``/``E`` pairs (what many non-torch tools write) are matched per thread and turned into
complete events; instants keep a zero duration; metadata names processes and threads (used to tell a
GPU stream from a CPU thread when events carry no category). Counters, flows and async events are not
timing slices of ops and are skipped.

No pandas here: the analysis layer (`trace.py`) builds its table from these columns.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Kineto writes the rank into traces of initialised process groups; file names from our distributed
# executor carry it too (rank<r>.<ns>.pt.trace.json.gz).
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[_-]?(\d+)", re.IGNORECASE)
_NO_CORRELATION = -1
_ARRAY_START = re.compile(rb"\s*\[")


@dataclass
class RawTrace:
    """The events of one Chrome trace file as columns (all the same length)."""

    path: Path
    name: list[str] = field(default_factory=list)
    category: list[str | None] = field(default_factory=list)
    ph: list[str] = field(default_factory=list)
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    pid: list[str] = field(default_factory=list)
    tid: list[str] = field(default_factory=list)
    correlation: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    shapes: list[str | None] = field(default_factory=list)
    process_names: dict[str, str] = field(default_factory=dict)
    thread_names: dict[tuple[str, str], str] = field(default_factory=dict)
    base_time_ns: int = 0
    rank: int | None = None
    device_properties: list = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.name)


def is_trace_file(path: Path) -> bool:
    """A Chrome trace by its name: ``*.json`` or ``*.json.gz`` (the run's metadata file excluded)."""
    name = path.name
    return path.is_file() and (name.endswith(".json") or name.endswith(".json.gz")) and not name.startswith(".")


def rank_from_name(path: Path) -> int | None:
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def read_json(path: Path):
    """The parsed JSON of a (possibly gzipped) trace file; ValueError naming the file when it is not JSON."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                data = handle.read()
        else:
            data = path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(
            f"{path}: not valid Chrome trace JSON (could not read/decompress it: {err}); the file may be truncated"
        ) from err
    if not data or data.isspace():  # isspace scans without copying a 100 MB buffer
        raise ValueError(f"{path}: not valid Chrome trace JSON (the file is empty)")
    try:
        return json.loads(data)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not valid Chrome trace JSON (not UTF-8 text: {err.reason})") from err
    except json.JSONDecodeError as err:
        # The Chrome trace spec lets the JSON *array* form end without its closing bracket (a tracer
        # killed mid-run); accept that one truncation, nothing else.
        if _ARRAY_START.match(data):
            try:
                return json.loads(data.rstrip().rstrip(b",") + b"]")
            except (json.JSONDecodeError, UnicodeDecodeError):
                pass
        raise ValueError(
            f"{path}: not valid Chrome trace JSON ({err.msg} at line {err.lineno} column {err.colno}); "
            "the file may be truncated or corrupt"
        ) from err


def parse_trace_file(path: str | Path) -> RawTrace:
    """Read one Chrome trace file (``.json`` or ``.json.gz``) into a RawTrace."""
    path = Path(path)
    doc = read_json(path)
    if isinstance(doc, list):  # the JSON array form: events only
        events, header = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events, header = doc["traceEvents"], doc
    else:
        kind = type(doc).__name__
        raise ValueError(f"{path}: not valid Chrome trace JSON (a {kind} without a 'traceEvents' list)")
    raw = RawTrace(path=path)
    _parse_events(events, raw)
    del doc, events  # the parsed JSON is the memory peak; drop it before the caller builds tables
    try:
        raw.base_time_ns = int(header.get("baseTimeNanoseconds") or 0)
    except (TypeError, ValueError):
        raw.warnings.append(f"{path.name}: ignored a non-numeric baseTimeNanoseconds")
    raw.device_properties = list(header.get("deviceProperties") or [])
    info = header.get("distributedInfo")
    rank = rank_from_name(path)
    if rank is None and isinstance(info, dict) and isinstance(info.get("rank"), int):
        rank = info["rank"]
    raw.rank = rank
    if not raw.name:
        raw.warnings.append(f"{path.name}: the trace holds no events (empty profile, or not a timing trace)")
    return raw


class _Ids(dict):
    """pid/tid -> its string, computed once per distinct id (ids repeat on every event)."""

    def __missing__(self, key) -> str:
        text = key if isinstance(key, str) else str(key)
        self[key] = text
        return text


def _parse_events(events: list, raw: RawTrace) -> None:
    """Fill `raw`'s columns from the event list; one pass, local appends (this loop is the hot path)."""
    names, cats, phs, pids, tids, shapes = raw.name, raw.category, raw.ph, raw.pid, raw.tid, raw.shapes
    ts_list: list[float] = []
    dur_list: list[float] = []
    corr_list: list[int] = []
    open_slices: dict[tuple[str, str], list[tuple]] = {}
    skipped = unmatched_end = 0
    last_ts = 0.0
    ids = _Ids()

    def add(name, cat, ph, ts, dur, pid, tid, args) -> None:
        names.append(name if isinstance(name, str) else ("" if name is None else str(name)))
        cats.append(cat if isinstance(cat, str) else None)
        phs.append(ph)
        ts_list.append(ts)
        dur_list.append(dur)
        pids.append(pid)
        tids.append(tid)
        if args and type(args) is dict:
            corr = args.get("correlation")
            corr_list.append(corr if type(corr) is int else _NO_CORRELATION)
            dims = args.get("Input Dims")
            shapes.append(None if dims is None else str(dims))
        else:
            corr_list.append(_NO_CORRELATION)
            shapes.append(None)

    for ev in events:
        if type(ev) is not dict:
            skipped += 1
            continue
        try:
            ph = ev.get("ph")
            ts = ev.get("ts", 0.0)
            if type(ts) is not float:
                try:
                    ts = float(ts)
                except (TypeError, ValueError):
                    skipped += 1
                    continue
            if ph == "X":
                dur = ev.get("dur", 0.0)
                if type(dur) is not float:
                    try:
                        dur = float(dur)
                    except (TypeError, ValueError):
                        dur = 0.0
                end = ts + dur
                if end > last_ts:
                    last_ts = end
                add(
                    ev.get("name"),
                    ev.get("cat"),
                    "X",
                    ts,
                    dur,
                    ids[ev.get("pid", "")],
                    ids[ev.get("tid", "")],
                    ev.get("args"),
                )
            elif ph == "B":
                key = (ids[ev.get("pid", "")], ids[ev.get("tid", "")])
                open_slices.setdefault(key, []).append((ev.get("name"), ev.get("cat"), ts, ev.get("args")))
                if ts > last_ts:
                    last_ts = ts
            elif ph == "E":
                key = (ids[ev.get("pid", "")], ids[ev.get("tid", "")])
                stack = open_slices.get(key)
                if ts > last_ts:
                    last_ts = ts
                if not stack:
                    unmatched_end += 1
                    continue
                name, cat, start, args = stack.pop()
                end_args = ev.get("args")
                if end_args and isinstance(end_args, dict):  # E may add args (e.g. return values)
                    args = {**(args or {}), **end_args}
                add(
                    name if name is not None else ev.get("name"),
                    cat if cat is not None else ev.get("cat"),
                    "X",
                    start,
                    ts - start,
                    key[0],
                    key[1],
                    args,
                )
            elif ph in ("i", "I"):
                add(
                    ev.get("name"),
                    ev.get("cat"),
                    "i",
                    ts,
                    0.0,
                    ids[ev.get("pid", "")],
                    ids[ev.get("tid", "")],
                    ev.get("args"),
                )
            elif ph == "M":
                args = ev.get("args") or {}
                kind = ev.get("name")
                key = "labels" if kind == "process_labels" else "name"
                label = args.get(key) if isinstance(args, dict) else None
                if label is None:
                    continue
                if kind in ("process_name", "process_labels"):
                    # Kineto names a GPU's process "python3" and labels it "GPU 0": keep both words.
                    pid = ids[ev.get("pid", "")]
                    raw.process_names[pid] = f"{raw.process_names.get(pid, '')} {label}".strip()
                elif kind == "thread_name":
                    raw.thread_names[(ids[ev.get("pid", "")], ids[ev.get("tid", "")])] = str(label)
            # counters (C), flows (s/t/f), async (b/n/e) and objects carry no op timing: skipped on purpose
        except TypeError:  # an unhashable pid/tid or similar: a malformed event, not a trace
            skipped += 1

    left_open = 0
    for (pid, tid), stack in open_slices.items():
        for name, cat, start, args in stack:
            # A slice still open when the trace ended ran at least until the last timestamp seen.
            add(name, cat, "X", start, max(last_ts - start, 0.0), pid, tid, args)
            left_open += 1
    raw.ts = np.asarray(ts_list, dtype=np.float64)
    raw.dur = np.asarray(dur_list, dtype=np.float64)
    raw.correlation = np.asarray(corr_list, dtype=np.int64)
    where = raw.path.name
    if skipped:
        raw.warnings.append(f"{where}: skipped {skipped} malformed event(s) (not an object, or a non-numeric ts)")
    if unmatched_end:
        raw.warnings.append(f"{where}: ignored {unmatched_end} 'E' event(s) without a matching 'B'")
    if left_open:
        raw.warnings.append(f"{where}: {left_open} 'B' event(s) without an 'E' were closed at the trace's end")
