"""Triage reports on disk: `write_json` (never overwriting, atomic) and `load_triage`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..._files import write_atomically
from .triage_report import TriageReport


def write_json(report: TriageReport, path: str | os.PathLike) -> Path:
    """Write `report` as JSON (schema 6) to `path`, or to `stem-2.json` (-3, ...) beside it when `path`
    is taken; returns the path written."""
    return write_atomically(path, json.dumps(report.to_dict(), indent=2) + "\n")


def load_triage(path: str | os.PathLike) -> TriageReport:
    """A triage report written by `TriageResult.to_json` / `mla-debug triage --json` (schema 1 to 6), as
    a TriageReport - without re-running anything.

    Raises FileNotFoundError for a missing file and ValueError, naming the file, for one that is not
    JSON, not a triage report, or of a schema this version does not read.
    """
    path = Path(path)
    if not path.is_file():
        if path.exists():
            raise ValueError(f"{path}: is a folder, not a triage report (.json)")
        raise FileNotFoundError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    try:
        return TriageReport.from_dict(data)
    except (KeyError, TypeError, ValueError) as err:
        detail = f"missing key {err}" if isinstance(err, KeyError) else str(err)
        raise ValueError(f"{path}: not a triage report this version can read ({detail})") from None
