"""Triage reports as plain data: `TriageReport` (JSON schema 6), its parts, and reading/writing them.

report = result.report()              # a live TriageResult's report
write_json(report, "triage.json")     # result.to_json("triage.json") does the same
report = load_triage("triage.json")   # schema 1 to 6; the same report, nothing re-run
"""

from .block_errors import BlockErrors
from .build import BLOCK, report_of
from .files import load_triage, write_json
from .run_report import RunReport
from .triage_report import (
    BLOCK_ERRORS_SINCE,
    CAVEATS_SINCE,
    PATCHING_SINCE,
    PROFILE_SINCE,
    READABLE_SCHEMAS,
    SCHEMA,
    TriageReport,
)

__all__ = [
    "BLOCK",
    "BLOCK_ERRORS_SINCE",
    "CAVEATS_SINCE",
    "PATCHING_SINCE",
    "PROFILE_SINCE",
    "READABLE_SCHEMAS",
    "SCHEMA",
    "BlockErrors",
    "RunReport",
    "TriageReport",
    "load_triage",
    "report_of",
    "write_json",
]
