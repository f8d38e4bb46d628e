"""Where a triage's numbers came from: weights, inputs, yardsticks, tables, software - as plain data.

A report is read days later by someone who did not run it; every figure in it must be traceable to
what produced it. `Provenance` is recorded by `triage` and written into the JSON and HTML reports.
"""

from __future__ import annotations

import platform as _platform
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .._json_records import JsonRecord
from .positions import TokenPositions


@dataclass(frozen=True)
class WeightsSource(JsonRecord):
    """Synthetic weights (with their seed) or a checkpoint (where it was read, which layer); `recipe`
    (`WeightRecipe.to_dict()`) when a dense checkpoint was block-quantized here before the triage."""

    kind: str  # "synthetic" or "checkpoint"
    seed: int | None = None
    path: str | None = None
    layer: int | None = None
    recipe: dict[str, Any] | None = None

    def describe(self) -> str:
        if self.kind == "synthetic":
            return f"synthetic, seed {self.seed}"
        where = self.path or "a Checkpoint object"
        text = f"checkpoint {where}, layer {self.layer}"
        if self.recipe is not None:
            block = "x".join(str(b) for b in self.recipe["block"])
            power = ", power-of-two scales" if self.recipe.get("ue8m0") else ""
            text += (
                f", dense weights block-quantized here ({self.recipe['flavor']} recipe, {self.recipe['fmt']}, "
                f"{block} blocks{power})"
            )
        return text


@dataclass(frozen=True)
class Provenance(JsonRecord):
    """Everything needed to re-run a triage and to judge its numbers."""

    mla_debug_version: str
    torch_version: str
    python_version: str
    model: str
    platform: str
    weights: WeightsSource
    scenario: dict[str, Any]  # Scenario.to_dict(): the definition, not just the name
    tokens: int
    seed: int  # seeds the input hidden states (and the weights when synthetic)
    device: str
    divergence_factor: float
    min_threshold: float
    tuned_table: str  # TunedTable.source of the table the scenario's kernel choice consulted
    created: str  # ISO 8601, UTC
    host: str = field(default_factory=lambda: f"{_platform.system()} {_platform.machine()}")
    # The same table's source as data (TableSource.to_dict(): origin embedded/files/env/installed-aiter,
    # files, aiter version or commit); None in reports written before it was recorded.
    tuned_table_source: dict[str, Any] | None = None
    # TokenPositions.to_dict() of the tokens (None in reports written before positions were recorded: 0..).
    positions: dict[str, Any] | None = None

    def line(self) -> str:
        """One line for a terminal: weights, inputs, yardsticks, versions."""
        where = ""
        if self.positions is not None and (self.positions.get("explicit") is not None or self.positions.get("start")):
            values = TokenPositions.from_dict(self.positions).values(self.tokens)
            where = (
                f" at positions {values[0]}..{values[-1]}"
                if self.positions.get("explicit") is None
                else (f" at explicit positions {min(values)}..{max(values)}")
            )
        return (
            f"weights {self.weights.describe()}; {self.tokens} tokens{where}, seed {self.seed}; on {self.device}; "
            f"threshold max({self.divergence_factor:g} x floor, {self.min_threshold:g}); "
            f"tuned table: {self.tuned_table}; mla_debug {self.mla_debug_version}, torch {self.torch_version}"
        )


def collect(session, scen, factor: float) -> Provenance:
    """The provenance of a triage of `scen` on the TriageSession `session` with divergence factor `factor`."""
    import torch

    from .._version import __version__
    from ..verdict import MIN_THRESHOLD

    table = session.tuned_table(scen)
    if session.checkpoint_source is None:
        weights = WeightsSource("synthetic", seed=session.seed)
    else:
        recipe = None if session.recipe is None else session.recipe.to_dict()
        weights = WeightsSource(
            "checkpoint", path=session.checkpoint_source or None, layer=session.ckpt.layer, recipe=recipe
        )
    return Provenance(
        mla_debug_version=__version__,
        torch_version=torch.__version__,
        python_version=sys.version.split()[0],
        model=session.cfg.name,
        platform=session.platform.name,
        weights=weights,
        scenario=scen.to_dict(),
        tokens=session.tokens,
        seed=session.seed,
        device=session.device.type,
        divergence_factor=float(factor),
        min_threshold=float(MIN_THRESHOLD),
        tuned_table=table.source,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        tuned_table_source=None if table.origin is None else table.origin.to_dict(),
        positions=TokenPositions.of(session.positions).to_dict(),
    )
