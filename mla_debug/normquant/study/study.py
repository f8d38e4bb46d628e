"""The norm+quant accuracy study over several input distributions, and its findings in words.

    study = accuracy_study(m=64, n=1536, backend="auto")   # every distribution of normquant_inputs
    study.summary            # one row per (distribution, path)
    study.conclusions()      # sentences, every number read from the results

The measurement itself (truth, units, bounds, tables) is `normquant_accuracy.measure_accuracy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from ...numerics import Fp8Format, QuantFlavor
from .accuracy import BASELINE, PATHS, SINGLE_ROUNDING_SLACK, NormQuantAccuracy, measure_accuracy
from .inputs import distribution_names, make_inputs


@dataclass
class NormQuantStudy:
    """`measure_accuracy` over several distributions: ``results[distribution]`` and the tables of all.

    ``summary``: one row per (distribution, path); ``groups`` / ``rows``: all per-group / per-row rows.
    """

    results: dict[str, NormQuantAccuracy]

    @property
    def summary(self):
        import pandas as pd

        return pd.concat([r.summary for r in self.results.values()], ignore_index=True).set_index(
            ["distribution", "path"]
        )

    @property
    def groups(self):
        import pandas as pd

        return pd.concat([r.groups for r in self.results.values()], ignore_index=True)

    @property
    def rows(self):
        import pandas as pd

        return pd.concat([r.rows for r in self.results.values()], ignore_index=True)

    def conclusions(self, other: str = "unfused") -> list[str]:
        """The study's findings in words, every number read from the results (fused vs `other`)."""
        return study_conclusions(self, other)


def accuracy_study(
    distributions: Iterable[str] | None = None,
    m: int = 64,
    n: int = 1536,
    seed: int = 0,
    eps: float = 1e-6,
    fmt: Fp8Format | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    backend: str = "auto",
    device: torch.device | str = "cpu",
    paths: Sequence[str] = tuple(PATHS),
) -> NormQuantStudy:
    """`measure_accuracy` on seeded inputs of every distribution (default: all of `distribution_names`).

    >>> study = accuracy_study(m=64, n=1536, backend="auto"); study.summary; study.conclusions()
    """
    names = list(distributions) if distributions is not None else distribution_names()
    results = {
        name: measure_accuracy(make_inputs(name, m, n, seed, eps, device), paths, fmt, flavor, backend)
        for name in names
    }
    return NormQuantStudy(results)


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def study_conclusions(study: NormQuantStudy, other: str = "unfused") -> list[str]:
    """Sentences computed from a study: worst errors against the bounds, how often and how much the
    double rounding changes the result, the rows the amax floor decides, the aiter test reference."""
    table = study.summary
    lines: list[str] = []
    paths = {p for _, p in table.index}
    if BASELINE in paths:
        fused = table.xs(BASELINE, level="path")
        worst = fused["max_err_ulp"].max()
        lines.append(
            f"Fused (single rounding): the worst element error over all distributions is {worst:.4f} fp8 ulp "
            f"(theory: 0.5 plus the fp32 norm's few-ulp error) - "
            f"{'within' if worst <= 0.5 + SINGLE_ROUNDING_SLACK else 'ABOVE'} the single-rounding bound."
        )
    if BASELINE in paths and other in paths:
        unf = table.xs(other, level="path")
        fused = table.xs(BASELINE, level="path")
        lines.append(
            f"{other.capitalize()} (double rounding): the worst element error is {unf['max_err_ulp'].max():.4f} fp8 ulp "
            f"(theory: up to 0.5 fp8 ulp + 0.5 bf16 ulp, about 0.56)."
        )
        gaps = unf["rel_l2"] / fused["rel_l2"] - 1
        widest = gaps.idxmax()
        lines.append(
            f"The elements that set their group's scale (the group amax) come out exact in the fused path (their "
            f"share of rel L2 at most {fused['amax_rel_l2'].max():.1e}) and keep their bf16 rounding in the "
            f"{other} path (up to {unf['amax_rel_l2'].max():.1e}); that is why {widest}, where a few large values "
            f"hold most of the norm, shows the largest gap in rel L2 ({gaps[widest]:+.2%})."
        )
        for dist in unf.index:
            u, f = unf.loc[dist], fused.loc[dist]
            lines.append(
                f"{dist}: {_pct(u['codes_differ'])} of fp8 codes and {_pct(u['scales_differ'])} of group scales differ; "
                f"fused has the lower error in {_pct(u['fused_better'])} of groups, the higher in "
                f"{_pct(u['fused_worse'])}, equal in {_pct(u['equal'])}; rel L2 {f['rel_l2']:.4e} fused vs "
                f"{u['rel_l2']:.4e} {other} ({(u['rel_l2'] / f['rel_l2'] - 1) * 100 if f['rel_l2'] else 0.0:+.2f}%), "
                f"mean error {f['mean_err_ulp']:.4f} vs {u['mean_err_ulp']:.4f} ulp."
            )
    floored = [
        (dist, r) for dist, r in study.results.items() if BASELINE in r.errors and bool((r.inputs.row_scale < 1).any())
    ]
    for dist, r in floored:
        rows = r.rows[r.rows["path"] == BASELINE]
        lost = rows[(rows["row_scale"] > 0) & (rows["rel_l2"] >= 0.5)]
        zero = rows[rows["row_scale"] == 0]
        if len(lost):
            largest = float(lost["row_scale"].max())
            lines.append(
                f"{dist}: {len(lost)} near-zero row(s) (magnitude <= {largest:.1e}) lose at least half their norm "
                f"(rel L2 >= 0.5) because the group amax is below the {r.flavor.group_amax_floor:g} floor and the "
                f"values flush into fp8 subnormals/zero - identically in every path; {len(zero)} exact zero row(s) "
                f"come out exactly zero (max error {float(zero['max_err_ulp'].max()) if len(zero) else 0.0:g})."
            )
    if "aiter_test_reference" in paths and other in paths:
        same = all(
            r.identical("aiter_test_reference", other)
            for r in study.results.values()
            if "aiter_test_reference" in r.errors and other in r.errors
        )
        lines.append(
            f"aiter's test reference is {'bitwise identical to' if same else 'NOT identical to'} the {other} path: it "
            "measures the fused kernel against a double-rounded answer, so its rtol = atol = 0.05 check cannot "
            "see the single rounding the kernel gets right."
        )
    return lines
