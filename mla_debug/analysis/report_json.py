"""The JSON written by `mla-debug triage --json` and `TriageResult.to_json`, and `load_triage` to read it back.

Schema (version 2; every key of version 1 is still written with its old meaning, new ones were added)::

  {"schema": 2,
   "model": str, "platform": str, "scenario": str, "tokens": int, "device": "cpu"|"cuda",
   "seed": int, "tp_sizes": [int], "modes": [str], "elapsed_s": float,
   "provenance": {"mla_debug_version", "torch_version", "python_version", "host": str,
                  "model", "platform": str,
                  "weights": {"kind": "synthetic"|"checkpoint", "seed": int|null, "path": str|null,
                              "layer": int|null},
                  "scenario": {...}  (Scenario.to_dict(): the scenario's definition),
                  "tokens", "seed": int, "device": str,
                  "divergence_factor", "min_threshold": float  (threshold = max(factor x floor, min)),
                  "tuned_table": str (TunedTable.source: "embedded shapes of aiter <commit>", a path,
                                      "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE: ...",
                                      "installed aiter <version>: ..."),
                  "tuned_table_source": {"origin": "embedded"|"files"|"env"|"installed-aiter",
                                         "files": [str], "aiter_version": str|null,
                                         "aiter_commit": str|null}|null  (written since schema 2),
                  "created": ISO 8601 UTC str},
   "bisection": {"trials", "runs", "reused", "skipped": int, "elapsed_s": float},
   "runs": [{"tp": int, "mode": "prefill"|"decode", "verdict": "ok"|"diverged",
             "first_divergent_step": str|null,
             "kernels": {linear: "kernel: why it was chosen"},
             "steps": [{"name": str, "kernel": str|null, "rel_err": float|null,
                        "violations": [str, ...]  (the messages),
                        "reason": str|null  (why the step's GEMM kernel was chosen),
                        "reference_kernel": str|null, "floor": float|null, "threshold": float|null,
                        "diverged": bool, "classification": str,
                        "max_abs", "cosine", "snr_db": float|null,
                        "input_layout", "scale_layout", "weight_layout": str|null,
                        "violation_details": [{"kind": str, "tensor", "consumer", "expected", "found": str,
                                               "effective": bool, "message": str}],
                        "stats": {"amax": float|null, "nan": int, "inf": int}|null}, ...]}, ...],
   "culprits": [{"tp": int, "mode": str, "step": str, "change": str, "explanation": str,
                 "layer": str, "changes": [change], "code_fixes": [remedy], "workarounds": [remedy],
                 "known_fix": {"scenario": str, "upstream": str, "restores": bool}|null,
                 "violations": [violation detail], "trials": int}, ...],
   "culprit_groups": [{"configs": [[tp, mode], ...], "culprits": [index into "culprits", ...]}],
   "unresolved": [[tp, mode], ...]}

  change = {"kind": "kernel-to-reference"|"honour-flags"|"behaviour"|"disable-kernel", "target": str,
            "description": str, "setting": str|null (vLLM class name of a disabled kernel),
            "remedy": "code-fix"|"workaround"}
  remedy = {"kind": "code-fix"|"workaround", "description": str,
            "setting": str|null (e.g. "VLLM_DISABLED_KERNELS=AiterPreshuffledFp8BlockScaledMMKernel"),
            "changes": [change]}

Every culprit's remedies and known fix were verified by running them. Floats that are not finite are
written as null (JSON has no NaN/Infinity). Files are written atomically and never overwrite an existing
one: a taken name gets a numbered sibling (name-2.json, ...).

`load_triage(path)` returns a `SavedTriage`: the same content as plain objects (summary and step tables
as DataFrames, culprits with their remedies, provenance) without re-running anything; files of
schema 1 load too (the keys they lack stay empty).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..layouts import ContractViolation, ViolationKind
from .bisection import BisectStats, Culprit, KnownFix, Remedy, group_culprits
from .changes import Change
from .provenance import Provenance

SCHEMA = 2


def _number(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _float(x: float | None) -> float:
    return math.nan if x is None else x


def violation_to_dict(v: ContractViolation) -> dict[str, Any]:
    return {
        "kind": v.kind.value,
        "tensor": v.tensor,
        "consumer": v.consumer,
        "expected": v.expected,
        "found": v.found,
        "effective": v.effective,
        "message": v.message,
    }


def violation_from_dict(data: dict[str, Any]) -> ContractViolation:
    return ContractViolation(
        kind=ViolationKind(data["kind"]),
        consumer=data["consumer"],
        tensor=data["tensor"],
        expected=data["expected"],
        found=data["found"],
        effective=bool(data["effective"]),
        message=data["message"],
    )


@dataclass
class SavedStep:
    """One step of one saved run: the row of `RunDiff.table`, plus the kernel's selection reason."""

    name: str
    kernel: str | None
    rel_err: float | None
    violations: list[ContractViolation] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # the violations' messages (all schema 1 kept)
    reason: str | None = None
    reference_kernel: str | None = None
    floor: float | None = None
    threshold: float | None = None
    diverged: bool = False
    classification: str = ""
    max_abs: float | None = None
    cosine: float | None = None
    snr_db: float | None = None
    input_layout: str | None = None
    scale_layout: str | None = None
    weight_layout: str | None = None
    stats: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kernel": self.kernel,
            "rel_err": _number(self.rel_err),
            "violations": list(self.messages),
            "reason": self.reason,
            "reference_kernel": self.reference_kernel,
            "floor": _number(self.floor),
            "threshold": _number(self.threshold),
            "diverged": self.diverged,
            "classification": self.classification,
            "max_abs": _number(self.max_abs),
            "cosine": _number(self.cosine),
            "snr_db": _number(self.snr_db),
            "input_layout": self.input_layout,
            "scale_layout": self.scale_layout,
            "weight_layout": self.weight_layout,
            "violation_details": [violation_to_dict(v) for v in self.violations],
            "stats": self.stats,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SavedStep:
        return cls(
            name=data["name"],
            kernel=data.get("kernel"),
            rel_err=data.get("rel_err"),
            violations=[violation_from_dict(v) for v in data.get("violation_details", [])],
            messages=list(data.get("violations", [])),
            reason=data.get("reason"),
            reference_kernel=data.get("reference_kernel"),
            floor=data.get("floor"),
            threshold=data.get("threshold"),
            diverged=bool(data.get("diverged", False)),
            classification=data.get("classification", ""),
            max_abs=data.get("max_abs"),
            cosine=data.get("cosine"),
            snr_db=data.get("snr_db"),
            input_layout=data.get("input_layout"),
            scale_layout=data.get("scale_layout"),
            weight_layout=data.get("weight_layout"),
            stats=data.get("stats"),
        )


@dataclass
class SavedRun:
    tp: int
    mode: str
    verdict: str
    first_divergent_step: str | None
    steps: list[SavedStep]
    kernels: dict[str, str] = field(default_factory=dict)

    @property
    def table(self):
        """pandas DataFrame, one row per step: the columns of `RunDiff.table`, then the kernel's selection
        reason and the input layout (non-finite errors were saved as null and read back as NaN)."""
        import pandas as pd

        return pd.DataFrame(
            [
                dict(
                    step=s.name,
                    kernel=s.kernel,
                    reference_kernel=s.reference_kernel,
                    scale_layout=s.scale_layout,
                    weight_layout=s.weight_layout,
                    violations="; ".join(s.messages),
                    rel_err=_float(s.rel_err),
                    max_abs=_float(s.max_abs),
                    cosine=_float(s.cosine),
                    snr_db=_float(s.snr_db),
                    floor=s.floor,
                    threshold=s.threshold,
                    diverged=s.diverged,
                    classification=s.classification,
                    reason=s.reason,
                    input_layout=s.input_layout,
                )
                for s in self.steps
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "mode": self.mode,
            "verdict": self.verdict,
            "first_divergent_step": self.first_divergent_step,
            "kernels": dict(self.kernels),
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SavedRun:
        return cls(
            tp=data["tp"],
            mode=data["mode"],
            verdict=data["verdict"],
            first_divergent_step=data.get("first_divergent_step"),
            steps=[SavedStep.from_dict(s) for s in data.get("steps", [])],
            kernels=dict(data.get("kernels", {})),
        )


def culprit_to_dict(k: Culprit) -> dict[str, Any]:
    return {
        "tp": k.tp,
        "mode": k.mode,
        "step": k.step,
        "change": k.change,
        "explanation": k.explanation,
        "layer": k.layer,
        "changes": [c.to_dict() for c in k.changes],
        "code_fixes": [r.to_dict() for r in k.code_fixes],
        "workarounds": [r.to_dict() for r in k.workarounds],
        "known_fix": k.known_fix.to_dict() if k.known_fix else None,
        "violations": [violation_to_dict(v) for v in k.violations],
        "trials": k.trials,
    }


def culprit_from_dict(data: dict[str, Any]) -> Culprit:
    return Culprit(
        tp=data["tp"],
        mode=data["mode"],
        step=data["step"],
        layer=data.get("layer", ""),
        change=data["change"],
        explanation=data["explanation"],
        changes=[Change.from_dict(c) for c in data.get("changes", [])],
        code_fixes=[Remedy.from_dict(r) for r in data.get("code_fixes", [])],
        workarounds=[Remedy.from_dict(r) for r in data.get("workarounds", [])],
        known_fix=KnownFix.from_dict(data["known_fix"]) if data.get("known_fix") else None,
        violations=[violation_from_dict(v) for v in data.get("violations", [])],
        trials=int(data.get("trials", 0)),
    )


@dataclass
class SavedTriage:
    """A triage as saved in JSON, as plain objects: open a report in a notebook without re-running.

    >>> saved = md.load_triage("reports/triage.json")
    >>> saved.summary; saved.culprit_groups[0].culprit.workarounds; saved.provenance.weights
    """

    model: str
    platform: str
    scenario: str
    tokens: int
    device: str
    runs: list[SavedRun]
    culprits: list[Culprit]
    seed: int | None = None
    tp_sizes: tuple[int, ...] = ()
    modes: tuple[str, ...] = ()
    elapsed_s: float | None = None
    provenance: Provenance | None = None
    bisection: BisectStats | None = None
    unresolved: list[tuple[int, str]] = field(default_factory=list)
    schema: int = SCHEMA

    @classmethod
    def of(cls, result) -> SavedTriage:
        """The saved form of a TriageResult."""
        from ..model.program import STEP_LINEARS

        runs = []
        for c in result.configs:
            kernels = dict(c.diff.run.kernels)
            steps = []
            for s in c.diff.steps:
                record = c.diff.run.records.get(s.name)
                stats = record.stats if record is not None else None
                linear = STEP_LINEARS.get(s.name)
                steps.append(
                    SavedStep(
                        name=s.name,
                        kernel=s.kernel,
                        rel_err=_number(s.rel_err),
                        violations=list(s.violations),
                        messages=[str(v) for v in s.violations],
                        reason=kernels.get(linear) if linear else None,
                        reference_kernel=s.reference_kernel,
                        floor=_number(s.floor),
                        threshold=_number(s.threshold),
                        diverged=bool(s.diverged),
                        classification=s.classification,
                        max_abs=_number(s.max_abs),
                        cosine=_number(s.cosine),
                        snr_db=_number(s.snr_db),
                        input_layout=record.input_layout if record is not None else None,
                        scale_layout=s.scale_layout,
                        weight_layout=s.weight_layout,
                        stats=None
                        if stats is None
                        else {"amax": _number(stats.amax), "nan": int(stats.nan), "inf": int(stats.inf)},
                    )
                )
            runs.append(SavedRun(c.tp, c.mode, c.verdict, c.diff.first_divergent_step, steps, kernels))
        return cls(
            model=result.model,
            platform=result.platform,
            scenario=result.scenario,
            tokens=result.tokens,
            device=result.device,
            runs=runs,
            culprits=list(result.culprits),
            seed=result.seed,
            tp_sizes=tuple(result.tp_sizes),
            modes=tuple(result.modes),
            elapsed_s=result.elapsed_s,
            provenance=result.provenance,
            bisection=result.bisection,
            unresolved=[tuple(u) for u in result.unresolved],
        )

    # -- the views a notebook wants --------------------------------------------------------------------
    def run(self, tp: int, mode: str) -> SavedRun:
        for r in self.runs:
            if r.tp == tp and r.mode == mode:
                return r
        raise KeyError(f"no run at TP{tp} {mode}; have {[(r.tp, r.mode) for r in self.runs]}")

    @property
    def summary(self):
        """pandas DataFrame, one row per (TP size, mode), with the columns of `TriageResult.summary`."""
        import pandas as pd

        rows = []
        for r in self.runs:
            scored = [s for s in r.steps if s.rel_err is not None] or r.steps
            worst = max(scored, key=lambda s: s.rel_err if s.rel_err is not None else math.inf, default=None)
            kinds = sorted({v.kind.value for s in r.steps for v in s.violations if v.effective})
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

    def step_table(self, tp: int, mode: str):
        return self.run(tp, mode).table

    @property
    def culprit_groups(self):
        return group_culprits(self.culprits)

    # -- JSON ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        culprits = list(self.culprits)
        index = {id(k): i for i, k in enumerate(culprits)}
        return {
            "schema": self.schema,
            "model": self.model,
            "platform": self.platform,
            "scenario": self.scenario,
            "tokens": self.tokens,
            "device": self.device,
            "seed": self.seed,
            "tp_sizes": list(self.tp_sizes),
            "modes": list(self.modes),
            "elapsed_s": _number(self.elapsed_s),
            "provenance": self.provenance.to_dict() if self.provenance else None,
            "bisection": None
            if self.bisection is None
            else {
                "trials": self.bisection.trials,
                "runs": self.bisection.runs,
                "reused": self.bisection.reused,
                "skipped": self.bisection.skipped,
                "elapsed_s": _number(self.bisection.elapsed_s),
            },
            "runs": [r.to_dict() for r in self.runs],
            "culprits": [culprit_to_dict(k) for k in culprits],
            "culprit_groups": [
                {"configs": [list(c) for c in g.configs], "culprits": [index[id(k)] for k in g.culprits]}
                for g in group_culprits(culprits)
            ],
            "unresolved": [list(u) for u in self.unresolved],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SavedTriage:
        if not isinstance(data, dict) or "runs" not in data or "model" not in data:
            raise ValueError("not a triage report: a JSON object with 'model' and 'runs' keys is expected")
        bisection = data.get("bisection")
        return cls(
            model=data["model"],
            platform=data["platform"],
            scenario=data["scenario"],
            tokens=data["tokens"],
            device=data.get("device", "cpu"),
            runs=[SavedRun.from_dict(r) for r in data["runs"]],
            culprits=[culprit_from_dict(k) for k in data.get("culprits", [])],
            seed=data.get("seed"),
            tp_sizes=tuple(data.get("tp_sizes", ())),
            modes=tuple(data.get("modes", ())),
            elapsed_s=data.get("elapsed_s"),
            provenance=Provenance.from_dict(data["provenance"]) if data.get("provenance") else None,
            bisection=BisectStats(**bisection) if bisection else None,
            unresolved=[tuple(u) for u in data.get("unresolved", [])],
            schema=int(data.get("schema", 1)),
        )


def triage_to_dict(result) -> dict:
    return SavedTriage.of(result).to_dict()


def load_triage(path: str | os.PathLike) -> SavedTriage:
    """A triage report written by `TriageResult.to_json` / `mla-debug triage --json`, as a SavedTriage."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    try:
        return SavedTriage.from_dict(data)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: not a triage report this version can read ({err})") from None


def fresh_path(path: str | os.PathLike) -> Path:
    """`path` if free, else the first free `stem-2.suffix`, `stem-3.suffix`, ... beside it."""
    path = Path(path)
    if not path.exists():
        return path
    for n in range(2, 10_000):
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(f"no free name beside {path}")


def write_atomically(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to a fresh file (never an existing one) through a temporary file.

    The temporary file is hard-linked to the target name, which fails if the name was taken in the
    meantime (then the next free name is tried), so even a concurrent writer is never overwritten.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        for _ in range(10_000):
            target = fresh_path(target)
            try:
                os.link(tmp, target)
                return target
            except FileExistsError:
                continue
        raise FileExistsError(f"no free name beside {path}")
    finally:
        tmp.unlink(missing_ok=True)


def write_json(result, path) -> Path:
    return write_atomically(path, json.dumps(triage_to_dict(result), indent=2) + "\n")
