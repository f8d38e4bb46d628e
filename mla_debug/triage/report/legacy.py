"""Reading triage reports of schema 1 and 2 (written before reports were typed) as schema 3.

Schema 2 spelled layouts and kernel choices as sentences; they are read back into the typed values
here, the only place that parses them (the sentences were made by one formatter each, so the grammar
is closed):

- a kernel choice ``"<kernel>: <reason>"`` (``"dense (unquantized)"`` for an unquantized linear); the
  reason is kept whole, so ``str()`` of the choice gives the original line back;
- a scale layout ``"<LAYOUT> written"`` or ``"<LAYOUT> written, read as <LAYOUT>"``;
- a weight layout ``"plain"`` (``"plain (dense)"``) or transforms joined by ``"; "``:
  ``"shuffle(16, 16) by <who>"`` and ``"pad K to a multiple of <n> by <who>"``.

Schema 1 had neither layouts, kernel choices nor violation details (only their messages, which
cannot be typed again and are left out), and no provenance. Neither schema kept block errors.
"""

from __future__ import annotations

import re
from typing import Any

from ...kernels import KernelChoice
from ...layouts import ScaleLayout, ScaleRead, weight_layout_from_text

_DENSE_CHOICE = "dense (unquantized)"
_SCALE = re.compile(r"(?P<written>[A-Z_]+) written(?:, read as (?P<read_as>[A-Z_]+))?")


def choice_from_text(text: str | None, where: str) -> dict[str, Any] | None:
    """The KernelChoice (as JSON data) a schema 2 ``"<kernel>: <reason>"`` line describes."""
    if text is None:
        return None
    if text == _DENSE_CHOICE:
        return KernelChoice.dense().to_dict()
    kernel, sep, reason = str(text).partition(": ")
    if not sep or not kernel:
        raise ValueError(f"{where}: kernel choice {text!r} is not '<kernel>: <reason>'")
    return KernelChoice(kernel, reason).to_dict()


def scale_from_text(text: str | None, where: str) -> dict[str, Any] | None:
    """The ScaleRead (as JSON data) a schema 2 scale-layout sentence describes."""
    if text is None:
        return None
    match = _SCALE.fullmatch(str(text))
    try:
        if match is None:
            raise KeyError(text)
        read_as = match["read_as"]
        return ScaleRead(ScaleLayout[match["written"]], ScaleLayout[read_as] if read_as else None).to_dict()
    except KeyError:
        raise ValueError(
            f"{where}: scale layout {text!r} is not '<LAYOUT> written[, read as <LAYOUT>]' with a layout of "
            f"{', '.join(layout.name for layout in ScaleLayout)}"
        ) from None


def weight_from_text(text: str | None, where: str) -> dict[str, Any] | None:
    """The WeightLayout (as JSON data) a schema 2 weight-layout sentence describes."""
    return None if text is None else weight_layout_from_text(str(text), where).to_dict()


def _number(data: dict[str, Any], key: str) -> float | str:
    """A metric of an older step: null meant "not finite" (schema 2) or "not written" (schema 1), so
    either way there is no number - NaN, as the live tables show a missing error."""
    value = data.get(key)
    return "nan" if value is None else value


def _step(data: dict[str, Any], where: str) -> dict[str, Any]:
    where = f"{where} step {data.get('name')}"
    stats = data.get("stats")
    return {
        "name": data["name"],
        "kernel": data.get("kernel"),
        "reference_kernel": data.get("reference_kernel"),
        "selection": choice_from_text(data.get("reason"), where),
        "scale_layout": scale_from_text(data.get("scale_layout"), where),
        "weight_layout": weight_from_text(data.get("weight_layout"), where),
        # Schema 1 kept only the messages; a violation cannot be typed again from its message.
        "violations": list(data.get("violation_details", [])),
        **{key: _number(data, key) for key in ("rel_err", "max_abs", "cosine", "snr_db")},
        "floor": data.get("floor"),
        "threshold": data.get("threshold"),
        "diverged": bool(data.get("diverged", False)),
        "classification": data.get("classification", ""),
        "stats": None if stats is None else {**stats, "amax": "nan" if stats.get("amax") is None else stats["amax"]},
    }


def _run(data: dict[str, Any]) -> dict[str, Any]:
    where = f"run TP{data.get('tp')} {data.get('mode')}"
    return {
        "tp": data["tp"],
        "mode": data["mode"],
        "verdict": data["verdict"],
        "first_divergent_step": data.get("first_divergent_step"),
        "kernels": {
            linear: choice_from_text(text, f"{where} linear {linear}")
            for linear, text in data.get("kernels", {}).items()
        },
        "steps": [_step(s, where) for s in data.get("steps", [])],
    }


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 or 2 report data as schema 3 data (the keys an older file lacks stay empty)."""
    return {
        **{key: value for key, value in data.items() if key not in ("runs", "schema")},
        "schema": data.get("schema", 1),
        "runs": [_run(r) for r in data["runs"]],
        "block_errors": [],
    }
