"""Reproduce an incident at one op: the operands an engine held (a planted capture of a single GEMM), the
output its consumer computed from them, and what mla_debug makes of them.

The spec (``reproduce.operands`` of an incident file) names the op - a grouped GEMM ``einsum("tgd,grd->
tgr")`` (DeepSeek-V4's wo_a, DeepGEMM ``fp8_einsum``) or a linear - its shapes (the thread's, or scaled
down where it says so), how the producer quantized the activation (`numerics` flavor; fp32 scales,
scales rounded up to powers of two before the cast, or rounded only after it), in which representation
and row order it handed the scales over, how the weight's block scales were held, and what the consumer
does with what it is handed (`kernels.held_scales`). Activations are seeded normal values whose
magnitude varies by (token, group) over ``spread`` decades, as real activations' amax does.

`run_operands` builds the configuration the reporter had (the bad one) and each variant (``fix``,
``workaround``: overrides of the spec), and for each: the observed output, `explain.operands.explain_operands`'s
verdict on the held tensors, and the output's error against the fp32 truth (the unquantized activation
times the checkpoint's dequantized weight) judged by the triage's rule - divergence is an error above
``DIVERGENCE_FACTOR`` x the noise floor (the correct FP8 path's error against the same truth), at least
``MIN_THRESHOLD``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..explain.explain import StepExplanation
from ..explain.format_stories import FormatOperands
from ..explain.operands import explain_operands
from ..kernels.held_scales import CONSUMERS, FP32, block_gemm, consumer_read, dequantize_as_read
from ..layouts.scale_format import codes_read_as_values, e8m0_codes, grouped_scale_read, pack_exponents
from ..numerics import rel_l2
from ..numerics.quantize import block_quantize, ceil_pow2, group_quantize
from ..verdict import DIVERGENCE_FACTOR, MIN_THRESHOLD

GROUP = 128
OPS = ("grouped", "linear")
ACT_SCALES = ("fp32", "ue8m0", "ue8m0-after-quant")
HELD = ("values", "packed")
WEIGHT_HELD = ("values", "packed", "codes-as-values")
ROWS = ("group-major", "token-major")
_SPEC_KEYS = (
    "op",
    "step",
    "tensor",
    "shape",
    "ranks",
    "seed",
    "spread",
    "activation",
    "weight",
    "consumer",
    "variants",
)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) else value
        )
    return out


def _choice(where: str, key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{where}: {key} {value!r} is not one of {', '.join(allowed)}")
    return value


@dataclass(frozen=True)
class OperandSpec:
    """One configuration of the op, validated (see the module docstring for the keys)."""

    op: str
    step: str
    tensor: str
    tokens: int
    groups: int
    dim: int
    rank: int
    ranks: int = 1
    seed: int = 0
    spread: float = 1.0
    act_flavor: str = "sglang-triton"
    act_scale: str = "fp32"
    act_held: str = "values"
    act_rows: str = "group-major"
    weight_held: str = "values"
    weight_ue8m0: bool = True
    consumer: str = FP32

    @classmethod
    def parse(cls, where: str, data: Mapping[str, Any]) -> OperandSpec:
        unknown = sorted(set(data) - set(_SPEC_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown operand key(s) {', '.join(unknown)}; known: {', '.join(_SPEC_KEYS)}")
        shape = dict(data.get("shape") or {})
        act = dict(data.get("activation") or {})
        weight = dict(data.get("weight") or {})
        op = _choice(where, "op", data.get("op"), OPS)
        groups = int(shape.get("groups", 1)) if op == "grouped" else 1
        spec = cls(
            op=op,
            step=str(data.get("step", op)),
            tensor=str(data.get("tensor", data.get("step", op))),
            tokens=int(shape["tokens"]),
            groups=groups,
            dim=int(shape["dim"]),
            rank=int(shape["rank"]),
            ranks=int(data.get("ranks", 1)),
            seed=int(data.get("seed", 0)),
            spread=float(data.get("spread", 1.0)),
            act_flavor=str(act.get("flavor", "sglang-triton")),
            act_scale=_choice(where, "activation.scale", act.get("scale", "fp32"), ACT_SCALES),
            act_held=_choice(where, "activation.held", act.get("held", "values"), HELD),
            act_rows=_choice(where, "activation.rows", act.get("rows", "group-major"), ROWS),
            weight_held=_choice(where, "weight.held", weight.get("held", "values"), WEIGHT_HELD),
            weight_ue8m0=bool(weight.get("ue8m0", True)),
            consumer=_choice(where, "consumer", data.get("consumer", FP32), CONSUMERS),
        )
        if spec.dim % GROUP or spec.rank % GROUP:
            raise ValueError(f"{where}: shape dim={spec.dim} and rank={spec.rank} must be multiples of {GROUP}")
        if spec.act_held == "packed" and spec.act_scale == "fp32":
            raise ValueError(f"{where}: packed activation scales hold codes of powers of two; fp32 scales are not")
        if spec.weight_held != "values" and not spec.weight_ue8m0:
            raise ValueError(f"{where}: weight.held {spec.weight_held} needs power-of-two block scales (ue8m0: true)")
        return spec


@dataclass(frozen=True)
class Built:
    """One rank of one configuration: what the engine held, what it output, and the fp32 truth."""

    operands: FormatOperands
    observed: torch.Tensor
    truth: torch.Tensor
    reference: torch.Tensor  # the correct FP8 path's output (fp32 scales read as fp32): the noise floor's run


def _activation(spec: OperandSpec, gen: torch.Generator) -> torch.Tensor:
    lead = (spec.tokens, spec.groups) if spec.op == "grouped" else (spec.tokens,)
    rows = 1
    for n in lead:
        rows *= n
    decades = torch.rand(rows, generator=gen) * spec.spread
    magnitude = (10.0**decades).view(*lead, 1)
    return (torch.randn(*lead, spec.dim, generator=gen) * magnitude).to(torch.bfloat16).to(torch.float32)


def _weight(spec: OperandSpec, gen: torch.Generator):
    mats = spec.groups if spec.op == "grouped" else 1
    codes, scales, dense = [], [], []
    for _ in range(mats):
        w = torch.randn(spec.rank, spec.dim, generator=gen) * 0.02
        q, s, _ = block_quantize(
            w, (GROUP, GROUP), "e4m3fn", "deepgemm", ue8m0=spec.weight_ue8m0, name=f"{spec.step}.weight"
        )
        codes.append(q)
        scales.append(s)
        dense.append(dequantize_as_read(q, s, GROUP))
    if spec.op == "linear":
        return codes[0], scales[0], dense[0]
    return torch.stack(codes), torch.stack(scales), torch.stack(dense)


def _quantize_activation(spec: OperandSpec, o: torch.Tensor):
    """Codes and the scale as the producer hands it over (logical values, x's groups), per `act_scale`."""
    rounded = spec.act_scale == "ue8m0"
    codes, scale, _ = group_quantize(o, GROUP, "e4m3fn", spec.act_flavor, ue8m0=rounded, name=f"{spec.step} input")
    if spec.act_scale == "ue8m0-after-quant":
        scale = ceil_pow2(scale)  # the scale rounded up after the cast: the codes keep the unrounded scale
    return codes, scale


def _held_activation(spec: OperandSpec, scale: torch.Tensor) -> torch.Tensor:
    if spec.act_held == "values":
        return scale
    return pack_exponents(scale.reshape(-1, scale.shape[-1]), masked=True, name=f"{spec.step} input scale")


def _held_weight(spec: OperandSpec, scale: torch.Tensor) -> torch.Tensor:
    if spec.weight_held == "values":
        return scale
    rows = scale.reshape(-1, scale.shape[-1])
    if spec.weight_held == "packed":
        return pack_exponents(rows, masked=True, name=f"{spec.step}.weight scale")
    return codes_read_as_values(e8m0_codes(scale, f"{spec.step}.weight scale"))  # the number is the code


def build(spec: OperandSpec) -> list[Built]:
    """Every rank of the configuration: seeded, so the bad configuration and its variants see the same
    activations and weights."""
    gen = torch.Generator().manual_seed(spec.seed)
    out = []
    for _ in range(spec.ranks):
        o = _activation(spec, gen)
        w_codes, w_scale, w_dense = _weight(spec, gen)
        x, scale = _quantize_activation(spec, o)
        act_held, w_held = _held_activation(spec, scale), _held_weight(spec, w_scale)
        groups = spec.dim // GROUP
        act_rows = act_held if act_held.dim() == 2 else act_held.reshape(-1, groups)
        act_read = consumer_read(act_rows, groups, spec.consumer, f"{spec.step} input scale").reshape(
            *x.shape[:-1], groups
        )
        if spec.op == "grouped" and spec.act_rows == "token-major":
            act_read = grouped_scale_read(act_read, "group-major")  # the consumer walks the groups' rows in turn
        w_rows = w_held if w_held.dim() == 2 else w_held.reshape(-1, w_held.shape[-1])
        w_read = consumer_read(w_rows, groups, spec.consumer, f"{spec.step}.weight scale").reshape(w_scale.shape)
        observed = block_gemm(x, act_read, w_codes, w_read, torch.bfloat16)
        # The correct FP8 path: the activation quantized with fp32 scales (its own codes), every scale read as held.
        ref_codes, ref_scale, _ = group_quantize(o, GROUP, "e4m3fn", spec.act_flavor, name=f"{spec.step} input")
        reference = block_gemm(ref_codes, ref_scale, w_codes, w_scale, torch.bfloat16)
        if spec.op == "grouped":
            truth = torch.einsum("tgd,grd->tgr", o, w_dense)
        else:
            truth = o @ w_dense.t()
        ops = FormatOperands(
            x,
            act_held,
            w_codes,
            w_held,
            torch.bfloat16,
            weight_scale_intended=w_scale,
            act_rows_written=spec.act_rows if spec.op == "grouped" else None,
        )
        out.append(Built(ops, observed, truth, reference))
    return out


@dataclass(frozen=True)
class ConfigOutcome:
    """One configuration reproduced: mla_debug's explanation of the held tensors, and the output against
    the fp32 truth with the triage's divergence rule."""

    name: str
    explanation: StepExplanation
    truth_err: float
    floor: float
    threshold: float

    @property
    def diverged(self) -> bool:
        return not self.truth_err <= self.threshold


@dataclass(frozen=True)
class OperandRun:
    """The bad configuration and each variant."""

    spec: OperandSpec
    bad: ConfigOutcome
    variants: dict[str, ConfigOutcome] = field(default_factory=dict)


def _worst(errors: list[float]) -> float:
    return max(errors) if errors else float("nan")


def run_config(name: str, spec: OperandSpec) -> ConfigOutcome:
    built = build(spec)
    explanation = explain_operands(
        spec.step, [b.operands for b in built], [b.observed for b in built], tensor=spec.tensor
    )
    truth_err = _worst([_truth_err(b.observed, b.truth) for b in built])
    floor = _worst([rel_l2(b.reference, b.truth) for b in built])
    return ConfigOutcome(name, explanation, truth_err, floor, max(DIVERGENCE_FACTOR * floor, MIN_THRESHOLD))


def _truth_err(observed: torch.Tensor, truth: torch.Tensor) -> float:
    if not bool(torch.isfinite(observed).all()):
        return float("inf")
    return rel_l2(observed, truth)


def run_operands(where: str, data: Mapping[str, Any]) -> OperandRun:
    """Reproduce ``reproduce.operands``: the bad configuration and every variant."""
    base = {k: v for k, v in data.items() if k != "variants"}
    spec = OperandSpec.parse(where, base)
    variants = {}
    for name, over in (data.get("variants") or {}).items():
        variants[name] = run_config(name, OperandSpec.parse(f"{where} variant {name}", _merge(base, over)))
    return OperandRun(spec, run_config("reported", spec), variants)
