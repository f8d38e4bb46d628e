"""Seeded activations for the norm+quant accuracy study: the row statistics an RMSNorm meets in an LLM.

Every generator draws on a CPU ``torch.Generator`` seeded with `seed` and only then moves the tensors to
`device`, so the same seed gives the same bytes on every machine. Activations are bf16 (M, n) - what
the q-lora GEMM hands the norm - and the norm weight is bf16 (n,), log-normal around 1 like trained
RMSNorm gains (``exp(0.25 * N(0, 1))``, about 0.5 to 2).

| name             | rows |
|------------------|------|
| normal           | N(0, 1) |
| heavy_tailed     | Student-t with 3 degrees of freedom: finite variance, a few values per row 10-30x the rms |
| outlier_channels | N(0, 1), with max(2, n/128) columns scaled by 50-100x (the massive channels of LLM activations) |
| near_zero_rows   | N(0, 1), except every 4th row: two of those exactly zero, the rest N(0, 1) x 1e-6 .. 1e-30 |
| mixed            | heavy_tailed, plus the outlier channels and the near-zero rows |

Near-zero rows are where the amax floor matters: with eps 1e-6 a row of magnitude a normalizes to about
a x 1e3, so once a < ~1e-13 the group amax falls under aiter's floor of 1e-10, the scale stops
following the data and the values sink into fp8's subnormals, then to zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# Student-t degrees of freedom: 3 is the heaviest tail with a finite variance (the rms stays meaningful).
T_DOF = 3
# Massive-activation channels in LLMs sit 1-2 orders of magnitude above the rest.
OUTLIER_FACTOR = (50.0, 100.0)
# Magnitudes of the near-zero rows, log-spaced between these powers of ten.
NEAR_ZERO_EXPONENTS = (-6.0, -30.0)
# How many of the near-zero rows are exactly zero (the first ones, in row order).
ZERO_ROWS = 2
# The spread of the norm weight: log-normal sigma.
WEIGHT_SIGMA = 0.25


@dataclass(frozen=True)
class NormQuantInputs:
    """One seeded input of the study.

    x: bf16 (M, n) activations; weight: bf16 (n,) RMSNorm gain; eps: the norm's epsilon.
    row_scale: float64 (M,) the magnitude each row was drawn at (1 for ordinary rows, 0 for the exact
    zero rows, 1e-6 .. 1e-30 for the near-zero rows), so results can be read per row kind.
    outlier_columns: the columns scaled into outliers (empty when there are none).
    """

    distribution: str
    x: torch.Tensor
    weight: torch.Tensor
    eps: float
    row_scale: torch.Tensor
    outlier_columns: tuple[int, ...]
    seed: int
    description: str

    @property
    def m(self) -> int:
        return self.x.shape[0]

    @property
    def n(self) -> int:
        return self.x.shape[1]


def _normal(gen: torch.Generator, m: int, n: int) -> torch.Tensor:
    return torch.randn(m, n, generator=gen, dtype=torch.float64)


def _student_t(gen: torch.Generator, m: int, n: int, dof: int = T_DOF) -> torch.Tensor:
    """Student-t from its definition, z / sqrt(chi2_dof / dof), with a chi-square as a sum of squares,
    so only the seeded generator is involved (torch.distributions would draw from the global RNG)."""
    z = torch.randn(m, n, generator=gen, dtype=torch.float64)
    chi2 = torch.randn(dof, m, n, generator=gen, dtype=torch.float64).square().sum(0)
    return z / torch.sqrt(chi2 / dof)


def _outlier_columns(gen: torch.Generator, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    n = x.shape[1]
    count = max(2, n // 128)
    columns = torch.randperm(n, generator=gen)[:count].sort().values
    low, high = OUTLIER_FACTOR
    factors = low + (high - low) * torch.rand(count, generator=gen, dtype=torch.float64)
    x = x.clone()
    x[:, columns] *= factors
    return x, tuple(int(c) for c in columns)


def _near_zero_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every 4th row (3, 7, 11, ...) shrunk: the first ZERO_ROWS of them to exact zero, the others to
    log-spaced magnitudes from 1e-6 down to 1e-30 (the last row the smallest)."""
    m = x.shape[0]
    rows = list(range(3, m, 4))
    scale = torch.ones(m, dtype=torch.float64)
    shrunk = rows[ZERO_ROWS:]
    first, last = NEAR_ZERO_EXPONENTS
    exponents = torch.linspace(first, last, len(shrunk), dtype=torch.float64) if shrunk else torch.empty(0)
    for row, exponent in zip(shrunk, exponents.tolist()):
        scale[row] = 10.0**exponent
    for row in rows[:ZERO_ROWS]:
        scale[row] = 0.0
    # +0 rows, like padding (a product with 0 would keep the sign of each drawn value: -0 bytes)
    x = torch.where(scale[:, None] == 0, torch.zeros_like(x), x * scale[:, None])
    return x, scale


def _normal_case(gen, m, n):
    return _normal(gen, m, n), torch.ones(m, dtype=torch.float64), ()


def _heavy_tailed_case(gen, m, n):
    return _student_t(gen, m, n), torch.ones(m, dtype=torch.float64), ()


def _outlier_case(gen, m, n):
    x, columns = _outlier_columns(gen, _normal(gen, m, n))
    return x, torch.ones(m, dtype=torch.float64), columns


def _near_zero_case(gen, m, n):
    x, scale = _near_zero_rows(_normal(gen, m, n))
    return x, scale, ()


def _mixed_case(gen, m, n):
    x, columns = _outlier_columns(gen, _student_t(gen, m, n))
    x, scale = _near_zero_rows(x)
    return x, scale, columns


Case = Callable[[torch.Generator, int, int], tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]]

# name -> (generator, one-line description); the order is the order of the study's tables.
DISTRIBUTIONS: dict[str, tuple[Case, str]] = {
    "normal": (_normal_case, "N(0, 1)"),
    "heavy_tailed": (_heavy_tailed_case, f"Student-t, {T_DOF} degrees of freedom"),
    "outlier_channels": (_outlier_case, "N(0, 1) with max(2, n/128) columns x 50-100"),
    "near_zero_rows": (
        _near_zero_case,
        f"N(0, 1); every 4th row tiny: {ZERO_ROWS} exact zeros, then magnitudes 1e-6 .. 1e-30",
    ),
    "mixed": (_mixed_case, "Student-t with outlier columns and near-zero rows"),
}


def distribution_names() -> list[str]:
    """The input distributions of the study, in table order."""
    return list(DISTRIBUTIONS)


def make_inputs(
    distribution: str,
    m: int = 64,
    n: int = 1536,
    seed: int = 0,
    eps: float = 1e-6,
    device: torch.device | str = "cpu",
) -> NormQuantInputs:
    """Seeded bf16 activations (M, n) of one `distribution` and a bf16 norm weight (n,).

    Same (distribution, m, n, seed), same bytes, on any device. n must be a multiple of 128 (the
    quantization group) - checked by the ops that take these inputs, not here, so a test can also
    draw odd widths. eps defaults to DeepSeek's rms_norm_eps.

    >>> inp = make_inputs("outlier_channels", m=64, n=1536, seed=0)
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; valid: {', '.join(DISTRIBUTIONS)}")
    if m < 1 or n < 1:
        raise ValueError(f"make_inputs: shape (m={m}, n={n}) must be positive")
    case, description = DISTRIBUTIONS[distribution]
    gen = torch.Generator().manual_seed(seed)
    weight = torch.exp(WEIGHT_SIGMA * torch.randn(n, generator=gen, dtype=torch.float64))
    x, row_scale, columns = case(gen, m, n)
    return NormQuantInputs(
        distribution=distribution,
        x=x.to(torch.bfloat16).to(device),
        weight=weight.to(torch.bfloat16).to(device),
        eps=float(eps),
        row_scale=row_scale,
        outlier_columns=columns,
        seed=seed,
        description=description,
    )
