"""The JSON written by `mla-debug triage --json` and `TriageResult.to_json` (a stable schema):

{"model": str, "platform": str, "scenario": str, "tokens": int, "device": "cpu"|"cuda",
 "runs": [{"tp": int, "mode": "prefill"|"decode", "verdict": "ok"|"diverged",
           "first_divergent_step": str|null,
           "steps": [{"name": str, "kernel": str|null, "rel_err": float, "violations": [str, ...]}, ...]}, ...],
 "culprits": [{"tp": int, "mode": str, "step": str, "change": str, "explanation": str}, ...]}

rel_err is the step output's relative L2 error against the same step of the reference run (non-finite
errors are written as null, since JSON has no NaN/Infinity). Files are written atomically and never
overwrite an existing one: a taken name gets a numbered sibling (name-2.json, ...).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None


def triage_to_dict(result) -> dict:
    return {
        "model": result.model,
        "platform": result.platform,
        "scenario": result.scenario,
        "tokens": result.tokens,
        "device": result.device,
        "runs": [
            {
                "tp": c.tp,
                "mode": c.mode,
                "verdict": c.verdict,
                "first_divergent_step": c.diff.first_divergent_step,
                "steps": [
                    {
                        "name": s.name,
                        "kernel": s.kernel,
                        "rel_err": _number(s.rel_err),
                        "violations": [str(v) for v in s.violations],
                    }
                    for s in c.diff.steps
                ],
            }
            for c in result.configs
        ],
        "culprits": [
            {"tp": k.tp, "mode": k.mode, "step": k.step, "change": k.change, "explanation": k.explanation}
            for k in result.culprits
        ],
    }


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
