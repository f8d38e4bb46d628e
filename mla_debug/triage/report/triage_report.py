"""`TriageReport`: everything a triage's HTML report, terminal summary and notebooks show, as plain data.

A live `TriageResult` holds the layer runs (tensors); its `report()` keeps what is drawn and read: per
configuration every step's comparison with the reference, the block-error matrices of the diverged
steps, culprits with their remedies and known fixes, provenance (versions, weights, the tuned table
consulted) and what bisection cost. The report has no tensors and round-trips through JSON exactly
(`to_dict`/`from_dict`), so a saved ``triage.json`` re-renders to the same HTML without re-running.

`to_dict` writes schema 6, whose keys docs/triage.md lists ("The saved report"). Files of every older
schema load, keeping what they hold, and a report drawn from one says what was not recorded: schemas 1 and
2 (`legacy.upgrade`) spelled layouts and kernel reasons as sentences and hold no block errors; "patching"
(`triage.patching.PatchConfirmation` per configuration) joined schema 3 as a key of its own, "profile" (and
the "set-setting" change) schema 4, "positions" and "caveats" schema 5 (an older file starts at position 0
and records no caveats), typed contract layouts (`layouts.ContractViolation.to_dict`) schema 6 - schemas 3
to 5 spelled them as sentences, which read back into the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..._checks import find
from ..._json_numbers import float_from_json, float_to_json
from ...scenarios import Resolution
from ..bisection import BisectStats, Culprit, CulpritGroup, group_culprits
from ..caveats import Caveat
from ..patching import PatchConfirmation
from ..positions import TokenPositions
from ..provenance import Provenance
from ..tables import error_matrix_frame, steps_frame, summary_frame
from .block_errors import BlockErrors
from .run_report import RunReport

SCHEMA = 6
READABLE_SCHEMAS = (1, 2, 3, 4, 5, 6)
# The first schema that kept each part: a report read from an older file lacks it for that reason.
BLOCK_ERRORS_SINCE = 3
PATCHING_SINCE = 3
PROFILE_SINCE = 4
CAVEATS_SINCE = 5


@dataclass
class TriageReport:
    """A TP triage as plain data: read it, draw it (`mla_debug.viz`), save it (`to_dict`, `write_json`).

    >>> report = md.triage("mini", "mi355x", "vllm-pr51692").report()   # or md.load_triage("triage.json")
    >>> report.summary; report.culprit_groups[0].culprit.workarounds; report.provenance.tuned_table
    >>> md.write_html(report, "triage.html")

    ``block_errors`` holds the token x block error matrices kept (by default the first divergent step
    of every diverged configuration: what the HTML report draws). ``patching`` holds the activation-
    patching confirmation of every diverged configuration that was checked, by (tp, mode) - the key of
    a culprit too, so `confirmation_of(culprit)` finds the check of the configuration it explains.
    ``profile`` says how an engine profile was resolved (engine, settings in effect, rules applied
    with their sources); None for another scenario or a file older than schema 4. ``positions`` says
    where the tokens sat; ``caveats`` what the verdicts do not cover (empty, and not recorded, for a
    file older than schema 5: see `caveats_recorded`).
    ``source_schema`` is the schema of the file the report was read from (SCHEMA for a report made
    here); `to_dict` always writes SCHEMA.
    """

    model: str
    platform: str
    scenario: str
    tokens: int
    device: str
    runs: list[RunReport]
    culprits: list[Culprit] = field(default_factory=list)
    seed: int | None = None
    tp_sizes: tuple[int, ...] = ()
    modes: tuple[str, ...] = ()
    elapsed_s: float | None = None
    provenance: Provenance | None = None
    bisection: BisectStats | None = None
    unresolved: list[tuple[int, str]] = field(default_factory=list)
    block_errors: list[BlockErrors] = field(default_factory=list)
    patching: dict[tuple[int, str], PatchConfirmation] = field(default_factory=dict)
    profile: Resolution | None = None
    positions: TokenPositions = field(default_factory=TokenPositions)
    caveats: list[Caveat] = field(default_factory=list)
    source_schema: int = SCHEMA

    # -- what a reader looks up --------------------------------------------------------------------
    def run(self, tp: int, mode: str) -> RunReport:
        return find(self.runs, lambda r: (r.tp, r.mode), (tp, mode), f"no run at TP{tp} {mode}", "have")

    @property
    def caveats_recorded(self) -> bool:
        """Whether the report could hold caveats: False for a file older than schema 5."""
        return self.source_schema >= CAVEATS_SINCE

    @property
    def diverged_runs(self) -> list[RunReport]:
        return [r for r in self.runs if r.diverged]

    @property
    def culprit_groups(self) -> list[CulpritGroup]:
        """Culprits that read the same apart from TP size and mode, once each (`Culprit.group_key`)."""
        return group_culprits(self.culprits)

    def confirmation(self, tp: int, mode: str) -> PatchConfirmation | None:
        """The activation-patching check of (tp, mode); None when none was recorded (the configuration
        did not diverge, the triage ran without patching, or the file predates the key)."""
        self.run(tp, mode)  # KeyError naming the runs when (tp, mode) is not one
        return self.patching.get((tp, mode))

    def confirmation_of(self, culprit: Culprit) -> PatchConfirmation | None:
        """The activation-patching check of the configuration `culprit` explains (None: not recorded)."""
        return self.confirmation(culprit.tp, culprit.mode)

    def default_step(self, tp: int, mode: str) -> str:
        """The step worth opening first: the first divergent one, else the worst one."""
        run = self.run(tp, mode)
        if run.first_divergent_step:
            return run.first_divergent_step
        worst = run.worst
        if worst is None:
            raise ValueError(f"TP{tp} {mode}: the run has no comparable step")
        return worst.name

    def blocks(self, tp: int, mode: str, step: str | None = None) -> BlockErrors:
        """The block-error matrix of `step` (default: `default_step`) at (tp, mode), when the report
        keeps it; KeyError saying which it keeps otherwise."""
        name = step or self.default_step(tp, mode)
        self.run(tp, mode).step(name)  # KeyError naming the steps when `name` is not one
        for b in self.block_errors:
            if b.key == (tp, mode, name):
                return b
        if self.source_schema < BLOCK_ERRORS_SINCE:
            raise KeyError(
                f"no block errors of TP{tp} {mode} {name}: the report was read from a schema "
                f"{self.source_schema} file, which keeps none (re-run the triage to get them)"
            )
        kept = ", ".join(f"TP{b.tp} {b.mode} {b.step}" for b in self.block_errors) or "none"
        raise KeyError(
            f"the report keeps no block errors of TP{tp} {mode} {name} (it keeps: {kept}); "
            f"ask the live result for them: result.report(block_steps=[({tp}, {mode!r}, {name!r})])"
        )

    # -- tables --------------------------------------------------------------------------------------
    @property
    def summary(self):
        """pandas DataFrame, one row per (TP size, mode), as `TriageResult.summary`."""
        return summary_frame(self.runs)

    def step_table(self, tp: int, mode: str):
        """pandas DataFrame, one row per step of (tp, mode), as `RunDiff.table`."""
        return steps_frame(self.run(tp, mode).steps)

    def error_matrix(self, mode: str):
        """pandas DataFrame of relative error: rows TP sizes, columns steps (in order)."""
        return error_matrix_frame(self.runs, mode)

    # -- JSON ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON schema 6 (see the module docstring); `from_dict` gives an equal report back."""
        index = {id(k): i for i, k in enumerate(self.culprits)}
        return {
            "schema": SCHEMA,
            "model": self.model,
            "platform": self.platform,
            "scenario": self.scenario,
            "tokens": self.tokens,
            "device": self.device,
            "seed": self.seed,
            "positions": self.positions.to_dict(),
            "caveats": [c.to_dict() for c in self.caveats],
            "tp_sizes": list(self.tp_sizes),
            "modes": list(self.modes),
            "elapsed_s": float_to_json(self.elapsed_s),
            "provenance": self.provenance.to_dict() if self.provenance else None,
            "bisection": self.bisection.to_dict() if self.bisection else None,
            "runs": [r.to_dict() for r in self.runs],
            "block_errors": [b.to_dict() for b in self.block_errors],
            "culprits": [k.to_dict() for k in self.culprits],
            "culprit_groups": [
                {"configs": [list(c) for c in g.configs], "culprits": [index[id(k)] for k in g.culprits]}
                for g in self.culprit_groups
            ],
            "unresolved": [list(u) for u in self.unresolved],
            "patching": [
                {"tp": tp, "mode": mode, **confirmation.to_dict()} for (tp, mode), confirmation in self.patching.items()
            ],
            "profile": self.profile.to_dict() if self.profile else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TriageReport:
        """A report from JSON data of schema 1 to 6 (READABLE_SCHEMAS). ValueError for anything else, saying why."""
        from .legacy import upgrade

        if not isinstance(data, dict) or "runs" not in data or "model" not in data:
            raise ValueError("not a triage report: a JSON object with 'model' and 'runs' keys is expected")
        schema = data.get("schema", 1)
        if isinstance(schema, bool) or not isinstance(schema, int) or schema not in READABLE_SCHEMAS:
            raise ValueError(
                f"triage report schema {schema!r} is not one this version of mla_debug reads "
                f"(schemas {', '.join(map(str, READABLE_SCHEMAS))})"
            )
        if schema < BLOCK_ERRORS_SINCE:
            data = upgrade(data)
        bisection = data.get("bisection")
        runs = [RunReport.from_dict(r) for r in data["runs"]]
        return cls(
            model=str(data["model"]),
            platform=str(data["platform"]),
            scenario=str(data["scenario"]),
            tokens=int(data["tokens"]),
            device=str(data.get("device", "cpu")),
            runs=runs,
            culprits=[Culprit.from_dict(k) for k in data.get("culprits", [])],
            seed=data.get("seed"),
            tp_sizes=tuple(int(tp) for tp in data.get("tp_sizes") or dict.fromkeys(r.tp for r in runs)),
            modes=tuple(str(m) for m in data.get("modes") or dict.fromkeys(r.mode for r in runs)),
            elapsed_s=float_from_json(data.get("elapsed_s"), "elapsed_s"),
            provenance=Provenance.from_dict(data["provenance"]) if data.get("provenance") else None,
            bisection=BisectStats.from_dict(bisection) if bisection else None,
            unresolved=[(int(tp), str(mode)) for tp, mode in data.get("unresolved", [])],
            block_errors=[BlockErrors.from_dict(b) for b in data.get("block_errors", [])],
            patching=_patching_from(data.get("patching", [])),
            profile=Resolution.from_dict(data["profile"]) if data.get("profile") else None,
            positions=TokenPositions.from_dict(data["positions"]) if data.get("positions") else TokenPositions(),
            caveats=[Caveat.from_dict(c) for c in data.get("caveats", [])],
            source_schema=schema,
        )


def _patching_from(entries: list[dict[str, Any]]) -> dict[tuple[int, str], PatchConfirmation]:
    """The "patching" key read back, keyed by (tp, mode); every attempt must be of its entry's
    configuration, and each configuration appear once (ValueError naming it otherwise)."""
    patching: dict[tuple[int, str], PatchConfirmation] = {}
    for entry in entries:
        key = (int(entry["tp"]), str(entry["mode"]))
        where = f"patching of TP{key[0]} {key[1]}"
        if key in patching:
            raise ValueError(f"{where}: the configuration appears twice; each is checked once")
        confirmation = PatchConfirmation.from_dict(entry)
        if not confirmation.attempts:
            raise ValueError(f"{where}: no attempts; a check has at least its first divergent step's")
        strays = list(dict.fromkeys((a.tp, a.mode) for a in confirmation.attempts if (a.tp, a.mode) != key))
        if strays:
            raise ValueError(
                f"{where}: attempts of other configurations {strays}; each attempt is of TP{key[0]} {key[1]}"
            )
        patching[key] = confirmation
    return patching
