"""How accurate is the fused RMSNorm + FP8 group quant, against the unfused path and an fp64 truth?

The yardstick is the **fp64 truth**: the RMSNorm of the same bf16 inputs computed in float64, never
quantized (`rmsnorm_truth`). Each path's fp8 output is dequantized exactly (fp8 value x fp32 scale, in
float64) and compared with it element by element; errors are then reduced per 1 x 128 group and per row.

Paths (`PATHS`):

- ``fused`` - `fused_qk_rmsnorm_group_quant`: fp32 norm, quantized straight from fp32 (one rounding).
- ``unfused`` - `norm_then_quant`: fp32 norm stored as bf16, then quantized (two roundings; the scale
  comes from the bf16-rounded amax). DeepSeek-V4's pre-fusion path quantizes exactly this tensor.
- ``aiter_test_reference`` - aiter's op_tests reference for the fused kernel: numerically the unfused
  path, kept under its own name so a table says which reference it was.

Units. An element's error is given in **fp8 ulps at the element**: the spacing of the fp8 grid at the
truth's position, ``s * spacing(y / s)``, with ``s = max(amax, floor) / fmt_max`` the group's *exact*
scale (amax of the fp64 truth, the flavor's floor and fp8 max) - one unit for every path, so their
errors compare directly. ``spacing(v)`` is ``2^(e - 3)`` for ``2^e <= |v| < 2^(e+1)`` and the subnormal
spacing ``2^(1 - bias - 3)`` below the smallest normal (e4m3: 3 mantissa bits). The per-group
``max_err_scale`` divides by ``s`` alone: the error in fp8 code units (a half ulp is up to 16 of them on
e4m3fn's top binade).

What theory gives (and `tests/normquant/test_normquant_accuracy.py` checks element by element):

- single rounding (fused): ``|err| <= 0.5 ulp`` plus the fp32 norm's own error (a few fp32 ulps of y,
  about 2^-16 of an fp8 ulp), whatever the distribution.
- double rounding (unfused): ``|err| <= 0.5 fp8 ulp + 0.5 bf16 ulp(y)`` - about 0.5 + 1/16 fp8 ulps on
  normal values, since bf16 keeps 4 more mantissa bits than e4m3.
- the two agree except near fp8 rounding midpoints: a code differs only where the bf16 rounding (and
  the scale's shift, ``|y| * |s_unfused - s_fused| / s``) moves the value across a midpoint, by one
  ulp; and the unfused path is never better than the fused one by more than that shift of its grid,
  ``|code_unfused| * |s_unfused - s_fused|`` (at most half a bf16 ulp of the group's amax).
- rows whose normalized amax falls below the floor (1e-10 for aiter) get the floor's scale; their
  values drop into fp8 subnormals and flush to zero in every path alike - there the relative error is 1
  while the error stays below half an ulp (of the floor's scale), and fusion changes nothing. Exact zero
  rows give exact zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from ...layouts import QuantizedActivation
from ...numerics import Fp8Format, QuantFlavor, fp8_format, quant_flavor
from .. import aiter_test_reference, fused_qk_rmsnorm_group_quant, norm_then_quant, resolve_backend
from .inputs import NormQuantInputs

GROUP = 128

PATHS: dict[str, str] = {
    "fused": "fused_qk_rmsnorm_group_quant: fp32 norm -> fp8 (single rounding)",
    "unfused": "norm_then_quant: fp32 norm -> bf16 -> fp8 (double rounding)",
    "aiter_test_reference": "aiter's op_tests reference: fp32 norm -> bf16 -> fp8 (double rounding)",
}

# Comparisons of two paths are made against this one.
BASELINE = "fused"

# What the fp32 norm may add to the single-rounding bound of 0.5 ulp, in ulps: its relative error is a
# few 2^-24, and a value is at most 16 of its own fp8 ulps (e4m3), so ~2^-17; 2^-12 leaves room for a GPU
# rsqrt within 2 fp32 ulps.
SINGLE_ROUNDING_SLACK = 2.0**-12


def rmsnorm_truth(x: torch.Tensor, weight: torch.Tensor, eps: float, gemma_norm: bool = False) -> torch.Tensor:
    """The RMSNorm of `x` (M, n) in float64, from the same (bf16) inputs, with no rounding to fp32.

    ``y = x / sqrt(mean(x^2) + eps) * w`` (``* (1 + w)`` with gemma_norm); bf16 and fp32 values are
    exact in float64, so the only errors are float64's own (~1e-16 relative), 2^29 times below an fp32
    ulp: for this study it is exact.
    """
    s = x.to(torch.float64)
    w = weight.to(torch.float64)
    if gemma_norm:
        w = w + 1.0
    return s * torch.rsqrt(s.square().mean(dim=-1, keepdim=True) + float(eps)) * w


def fp8_spacing(v: torch.Tensor, fmt: Fp8Format | str) -> torch.Tensor:
    """Spacing of the fp8 grid around each value of `v` (float64, values on the fp8 scale, i.e. already
    divided by the group scale): ``2^(e - 3)`` for ``2^e <= |v| < 2^(e+1)``, and the subnormal spacing
    ``2^(1 - bias - 3)`` for ``|v|`` below the smallest normal (0 included).

    >>> fp8_spacing(torch.tensor([1.0, 448.0, 0.0], dtype=torch.float64), "e4m3fn")  # 0.125, 32, 2^-9
    """
    fmt = fp8_format(fmt)
    emin = 1 - fmt.exponent_bias
    v = v.to(torch.float64).abs()
    _, exponent = torch.frexp(v)  # v = mantissa * 2^exponent, mantissa in [0.5, 1): floor(log2 v) = exponent - 1
    e = torch.clamp(exponent.to(torch.float64) - 1, min=float(emin))
    e = torch.where(v > 0, e, torch.full_like(e, float(emin)))
    return torch.exp2(e - 3)


def exact_scale(truth: torch.Tensor, fmt: Fp8Format | str, flavor: QuantFlavor | str, group_size: int = GROUP):
    """(M, G) float64: the scale an exact single-rounding quantizer would give each group of the truth,
    ``max(amax, floor) / fmt_max`` with the flavor's floor read as fp32 (as the kernels hold it)."""
    fmt, flavor = fp8_format(fmt), quant_flavor(flavor)
    m, n = truth.shape
    amax = truth.abs().view(m, n // group_size, group_size).amax(dim=-1)
    floor = float(torch.tensor(flavor.group_amax_floor, dtype=torch.float32))
    return amax.clamp_min(floor) / flavor.fmt_max(fmt)


def dequantize_exact(q: QuantizedActivation) -> torch.Tensor:
    """float64 (M, K) values of a quantized activation: fp8 value x scale with no rounding at all (the
    product of a 4-bit and a 24-bit significand is exact in float64), unlike an fp32 dequantization."""
    values = q.fmt.decode(q.data).to(torch.float64)
    scale = q.logical_scale().to(torch.float64)
    return (values.view(q.m, q.groups, q.group_size) * scale[..., None]).view(q.m, q.k)


def _fused(inp: NormQuantInputs, fmt, flavor, backend: str) -> QuantizedActivation:
    return fused_qk_rmsnorm_group_quant(inp.x, inp.weight, inp.eps, fmt=fmt, flavor=flavor, backend=backend).q_quant


def _unfused(inp: NormQuantInputs, fmt, flavor, backend: str) -> QuantizedActivation:
    return norm_then_quant(inp.x, inp.weight, inp.eps, fmt=fmt, flavor=flavor).q_quant


def _aiter_reference(inp: NormQuantInputs, fmt, flavor, backend: str) -> QuantizedActivation:
    return aiter_test_reference(inp.x, inp.weight, inp.eps, fmt=fmt, flavor=flavor).q_quant


_RUNNERS: dict[str, Callable[..., QuantizedActivation]] = {
    "fused": _fused,
    "unfused": _unfused,
    "aiter_test_reference": _aiter_reference,
}


def quantize_path(
    path: str,
    inputs: NormQuantInputs,
    fmt: Fp8Format | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    backend: str = "auto",
) -> QuantizedActivation:
    """Run one path of `PATHS` on `inputs` (on the inputs' device). `backend` is the fused op's backend
    ("auto" picks the fastest available; "torch" is the reference); the unfused paths have none."""
    if path not in _RUNNERS:
        raise ValueError(f"unknown path {path!r}; valid: {', '.join(PATHS)}")
    return _RUNNERS[path](inputs, fmt, flavor, backend)


def _rel(err_sq: torch.Tensor, ref_sq: torch.Tensor) -> torch.Tensor:
    """sqrt(err_sq / ref_sq), with 0 for an exact match of a zero reference and inf for a miss of it."""
    rel = torch.sqrt(err_sq / ref_sq)
    zero_ref = ref_sq == 0
    return torch.where(zero_ref, torch.where(err_sq == 0, 0.0, torch.inf).to(rel.dtype), rel)


@dataclass
class PathErrors:
    """Element-wise results of one path, on the CPU, shape (M, n) unless said otherwise.

    dequantized: float64 exact dequantized values; err: |dequantized - truth|; err_ulp: err in fp8 ulps
    at the element (see the module docstring); codes: fp8 ordinals (int32; +0 and -0 are both 0);
    scale: (M, G) float64, the scale the path wrote.
    """

    path: str
    quantized: QuantizedActivation
    dequantized: torch.Tensor
    err: torch.Tensor
    err_ulp: torch.Tensor
    codes: torch.Tensor
    scale: torch.Tensor


@dataclass
class NormQuantAccuracy:
    """The paths' errors on one input against the fp64 truth, per element, per group, per row.

    ``groups``: one row per (path, row, group) - see `group_table`; ``rows``: one row per (path, row);
    ``summary``: one row per path - see `summary_table`. ``errors[path]`` holds the element-wise tensors.
    ``backend`` is the fused op's backend that ran (what "auto" resolved to on the inputs' device).
    """

    inputs: NormQuantInputs
    fmt: Fp8Format
    flavor: QuantFlavor
    backend: str
    truth: torch.Tensor
    scale_exact: torch.Tensor
    ulp: torch.Tensor
    errors: dict[str, PathErrors]
    groups: object = field(repr=False)  # pandas.DataFrame
    rows: object = field(repr=False)
    summary: object = field(repr=False)

    @property
    def paths(self) -> list[str]:
        return list(self.errors)

    def group_matrix(self, path: str, metric: str = "max_err_ulp") -> torch.Tensor:
        """(M, G) float64 grid of one per-group metric of `path` (a column of `groups`)."""
        table = self.groups[self.groups["path"] == path]
        if table.empty:
            raise KeyError(f"no path {path!r} in this result; have {', '.join(self.paths)}")
        if metric not in table.columns:
            raise KeyError(f"no per-group metric {metric!r}; have {', '.join(table.columns)}")
        grid = torch.tensor(table[metric].to_numpy(dtype=float), dtype=torch.float64)
        return grid.view(self.inputs.m, self.inputs.n // GROUP)

    def identical(self, a: str, b: str) -> bool:
        """Whether two paths wrote the same fp8 codes and the same scales (bitwise)."""
        qa, qb = self.errors[a].quantized, self.errors[b].quantized
        return torch.equal(qa.data.view(torch.uint8), qb.data.view(torch.uint8)) and torch.equal(
            qa.logical_scale().view(torch.int32), qb.logical_scale().view(torch.int32)
        )


def _path_errors(path: str, q: QuantizedActivation, truth: torch.Tensor, ulp: torch.Tensor) -> PathErrors:
    q = replace(q, data=q.data.cpu(), scale=q.scale.cpu())
    deq = dequantize_exact(q)
    err = (deq - truth).abs()
    return PathErrors(
        path=path,
        quantized=q,
        dequantized=deq,
        err=err,
        err_ulp=err / ulp,
        codes=q.fmt.ordinal(q.data),
        scale=q.logical_scale().to(torch.float64),
    )


def group_table(inputs: NormQuantInputs, truth, scale_exact, errors: dict[str, PathErrors]):
    """pandas DataFrame, one row per (path, row, group), in path, row, group order. Columns:

    amax: the truth's amax over the group; scale: the path's scale; scale_vs_exact: scale / exact - 1
    (the unfused path's scale follows the bf16-rounded amax: up to 2^-9 off); max_err_ulp / mean_err_ulp:
    over the group's elements, in fp8 ulps at the element (single rounding: <= 0.5); max_err_scale: the
    largest error / exact scale (fp8 code units); l2_err: ||dequantized - truth||; rel_l2: l2_err /
    ||truth|| (0 for an exact zero group); codes_differ: elements whose fp8 code differs from the fused
    path's (by value: +0 and -0 agree); scale_differs: whether the scale differs from the fused one;
    flushed: elements with a non-zero truth quantized to zero.
    """
    import pandas as pd

    m, n = truth.shape
    g = n // GROUP
    base = errors.get(BASELINE)

    def grouped(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(m, g, GROUP)

    truth_sq = grouped(truth).square().sum(-1)
    amax = grouped(truth).abs().amax(-1)
    row_index = torch.arange(m).repeat_interleave(g)
    group_index = torch.arange(g).repeat(m)
    frames = []
    for path, e in errors.items():
        err_sq = grouped(e.err).square().sum(-1)
        differ = grouped(e.codes != base.codes).sum(-1) if base is not None else torch.zeros(m, g, dtype=torch.int64)
        scale_differs = (e.scale != base.scale) if base is not None else torch.zeros(m, g, dtype=torch.bool)
        flushed = grouped((truth != 0) & (e.codes == 0)).sum(-1)
        frames.append(
            pd.DataFrame(
                {
                    "distribution": inputs.distribution,
                    "path": path,
                    "row": row_index.numpy(),
                    "group": group_index.numpy(),
                    "row_scale": inputs.row_scale.repeat_interleave(g).numpy(),
                    "amax": amax.flatten().numpy(),
                    "scale": e.scale.flatten().numpy(),
                    "scale_vs_exact": (e.scale / scale_exact - 1).flatten().numpy(),
                    "max_err_ulp": grouped(e.err_ulp).amax(-1).flatten().numpy(),
                    "mean_err_ulp": grouped(e.err_ulp).mean(-1).flatten().numpy(),
                    "max_err_scale": (grouped(e.err).amax(-1) / scale_exact).flatten().numpy(),
                    "l2_err": err_sq.sqrt().flatten().numpy(),
                    "rel_l2": _rel(err_sq, truth_sq).flatten().numpy(),
                    "codes_differ": differ.flatten().numpy(),
                    "scale_differs": scale_differs.flatten().numpy(),
                    "flushed": flushed.flatten().numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def row_table(inputs: NormQuantInputs, truth, errors: dict[str, PathErrors]):
    """pandas DataFrame, one row per (path, row): row_scale (the magnitude the row was drawn at),
    truth_rms, max_err_ulp, rel_l2 over the row, codes_differ (from fused) and flushed elements."""
    import pandas as pd

    base = errors.get(BASELINE)
    truth_sq = truth.square().sum(-1)
    frames = []
    for path, e in errors.items():
        differ = (e.codes != base.codes).sum(-1) if base is not None else torch.zeros(truth.shape[0])
        frames.append(
            pd.DataFrame(
                {
                    "distribution": inputs.distribution,
                    "path": path,
                    "row": range(truth.shape[0]),
                    "row_scale": inputs.row_scale.numpy(),
                    "truth_rms": truth.square().mean(-1).sqrt().numpy(),
                    "max_err_ulp": e.err_ulp.amax(-1).numpy(),
                    "rel_l2": _rel(e.err.square().sum(-1), truth_sq).numpy(),
                    "codes_differ": differ.numpy(),
                    "flushed": ((truth != 0) & (e.codes == 0)).sum(-1).numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def summary_table(inputs: NormQuantInputs, truth, errors: dict[str, PathErrors], groups):
    """pandas DataFrame, one row per path. Columns:

    rel_l2: ||dequantized - truth|| / ||truth|| over the whole input; mean_group_rel_l2 /
    max_group_rel_l2: over groups; max_err_ulp / mean_err_ulp: over elements (fp8 ulps at the element);
    fused_better / fused_worse / equal: fractions of groups where the fused path's l2 error is below /
    above / equal to this path's (equal includes bitwise-identical outputs); codes_differ: fraction of
    elements whose fp8 code differs from the fused path's; scales_differ: fraction of groups whose scale
    does; flushed: fraction of the non-zero truth values quantized to zero; amax_rel_l2: the part of
    rel_l2 carried by the elements that set their group's scale (the group amax): the fused path maps
    them to fp8_max exactly, so only the fp32 norm's error remains, while the unfused path keeps their
    bf16 rounding - where a few large values (outlier channels) hold most of the norm, this dominates.
    """
    import pandas as pd

    base = groups[groups["path"] == BASELINE]["l2_err"].to_numpy() if BASELINE in errors else None
    nonzero = max(int((truth != 0).sum()), 1)
    truth_norm = float(truth.square().sum().sqrt())
    m, n = truth.shape
    magnitude = truth.abs().view(m, n // GROUP, GROUP)
    is_amax = ((magnitude == magnitude.amax(-1, keepdim=True)) & (magnitude > 0)).view(m, n)
    rows = []
    for path, e in errors.items():
        mine = groups[groups["path"] == path]
        err_norm = float(e.err.square().sum().sqrt())
        row = {
            "distribution": inputs.distribution,
            "path": path,
            "rel_l2": err_norm / truth_norm if truth_norm else (0.0 if err_norm == 0 else float("inf")),
            "mean_group_rel_l2": float(mine["rel_l2"].mean()),
            "max_group_rel_l2": float(mine["rel_l2"].max()),
            "max_err_ulp": float(e.err_ulp.max()),
            "mean_err_ulp": float(e.err_ulp.mean()),
        }
        if base is not None:
            l2 = mine["l2_err"].to_numpy()
            row["fused_better"] = float((base < l2).mean())
            row["fused_worse"] = float((base > l2).mean())
            row["equal"] = float((base == l2).mean())
            row["codes_differ"] = float((e.codes != errors[BASELINE].codes).double().mean())
            row["scales_differ"] = float(mine["scale_differs"].mean())
        row["flushed"] = float(((truth != 0) & (e.codes == 0)).sum()) / nonzero
        amax_norm = float(e.err[is_amax].square().sum().sqrt())
        row["amax_rel_l2"] = amax_norm / truth_norm if truth_norm else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def measure_accuracy(
    inputs: NormQuantInputs,
    paths: Sequence[str] = tuple(PATHS),
    fmt: Fp8Format | str = "e4m3fn",
    flavor: QuantFlavor | str = "aiter",
    backend: str = "auto",
) -> NormQuantAccuracy:
    """Run `paths` on `inputs` and measure each against the fp64 truth, per element, group and row.

    Runs on the inputs' device (pass ``backend="triton"`` or ``"auto"`` on a GPU; ``"torch"`` is the
    reference); every metric is computed in float64 on the CPU, so it adds no error of its own.

    >>> acc = measure_accuracy(make_inputs("heavy_tailed"), backend="torch"); acc.summary
    """
    fmt, flavor = fp8_format(fmt), quant_flavor(flavor)
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise ValueError(f"unknown path(s) {unknown}; valid: {', '.join(PATHS)}")
    if inputs.n % GROUP:
        raise ValueError(f"inputs: width n={inputs.n} is not a multiple of the {GROUP}-wide quantization group")
    truth = rmsnorm_truth(inputs.x, inputs.weight, inputs.eps).cpu()
    scale_exact = exact_scale(truth, fmt, flavor)
    s = scale_exact.repeat_interleave(GROUP, dim=1)
    ulp = s * fp8_spacing(truth / s, fmt)
    # Resolved once, so the result names the backend that ran ("auto" depends on the device).
    backend = resolve_backend(backend, inputs.x.device)
    errors = {p: _path_errors(p, quantize_path(p, inputs, fmt, flavor, backend), truth, ulp) for p in paths}
    groups = group_table(inputs, truth, scale_exact, errors)
    return NormQuantAccuracy(
        inputs=inputs,
        fmt=fmt,
        flavor=flavor,
        backend=backend,
        truth=truth,
        scale_exact=scale_exact,
        ulp=ulp,
        errors=errors,
        groups=groups,
        rows=row_table(inputs, truth, errors),
        summary=summary_table(inputs, truth, errors, groups),
    )
