"""The pandas tables of run diffs and triages, built from plain rows in one place.

A live `RunDiff`/`TriageResult` and a `TriageReport` read back from JSON hold the same plain step
records (`StepDiff`), so one builder makes the step table, the summary and the error matrix of both:
a saved report shows exactly the table the live result showed. Layout and kernel cells hold the typed
values (ScaleRead, WeightLayout, KernelChoice); their ``str`` is what a printed table shows. pandas
is imported inside the functions, so importing this module never needs it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .diff import StepDiff


class RunRows(Protocol):
    """What the summary needs of one configuration (a RunReport; TriageResult builds those cheaply)."""

    tp: int
    mode: str
    verdict: str
    first_divergent_step: str | None
    steps: list[StepDiff]

    @property
    def worst(self) -> StepDiff | None: ...


def steps_frame(steps: Iterable[StepDiff]):
    """pandas DataFrame, one row per step: kernels, layouts, violations (their messages), errors and
    yardsticks, verdict and classification, then why the step's linear got its kernel."""
    import pandas as pd

    columns = [
        "step",
        "kernel",
        "reference_kernel",
        "scale_layout",
        "weight_layout",
        "violations",
        "rel_err",
        "max_abs",
        "cosine",
        "snr_db",
        "floor",
        "threshold",
        "diverged",
        "classification",
        "selection",
    ]
    rows = [
        [
            s.name,
            s.kernel,
            s.reference_kernel,
            s.scale_layout,
            s.weight_layout,
            "; ".join(str(v) for v in s.violations),
            s.rel_err,
            s.max_abs,
            s.cosine,
            s.snr_db,
            s.floor,
            s.threshold,
            s.diverged,
            s.classification,
            s.selection,
        ]
        for s in steps
    ]
    return pd.DataFrame(rows, columns=columns)


def summary_frame(runs: Iterable[RunRows]):
    """pandas DataFrame, one row per (TP size, mode): verdict, first divergent and worst step, and the
    kinds of the effective layout violations."""
    import pandas as pd

    rows = []
    for r in runs:
        worst = r.worst
        kinds = sorted({str(v.kind) for s in r.steps for v in s.effective_violations})
        rows.append(
            dict(
                tp=r.tp,
                mode=r.mode,
                verdict=r.verdict,
                first_divergent_step=r.first_divergent_step,
                worst_step=worst.name if worst else None,
                worst_rel_err=worst.rel_err if worst else None,
                violations=", ".join(kinds),
            )
        )
    return pd.DataFrame(rows)


def error_matrix_frame(runs: Iterable[RunRows], mode: str):
    """pandas DataFrame of relative error: rows TP sizes, columns steps (in order)."""
    import pandas as pd

    rows = {r.tp: {s.name: s.rel_err for s in r.steps} for r in runs if r.mode == mode}
    return pd.DataFrame.from_dict(rows, orient="index")
