"""An oracle of vLLM 0.33.0's C++ ``per_token_group_fp8_quant``, written from its source (tests only).

The kernel (csrc/quantization/w8a8/fp8/per_token_group_quant.cu in vLLM's repository) is compiled into the
wheel's ``_C_stable_libtorch.abi3.so`` and needs a CUDA or ROCm GPU, so it cannot run here; this restates
it statement by statement, sharing no code with ``mla_debug.numerics``. fp32 operations are done in float64
and rounded to fp32 (exact: a quotient of two fp32 numbers rounded to float64 and then to fp32 is the
correctly rounded fp32 quotient; vLLM builds its kernels without fast math, so ``/`` is IEEE division). The
per-element steps, for a group of ``group_size`` contiguous values:

- ``float local_absmax = eps; local_absmax = fmaxf(local_absmax, fabsf(x))``: fmaxf returns the non-NaN
  operand, so NaN never enters the amax and the amax is at least ``(float)eps``.
- ``float y_s = local_absmax / max_8bit``.
- ue8m0 (the register kernels, which a bf16/fp16 group of 128 takes): ``y_s = fmaxf(fabsf(y_s), 1e-10f)``,
  then the scale is ``(exponent + (mantissa != 0)) << 23`` of its bits, and values are multiplied by
  ``1.0f / y_s``; otherwise ``x / y_s``.
- ``q = fminf(fmaxf(scaled, min_8bit), max_8bit)``: NaN becomes min_8bit.
- ``DST_DTYPE(q)``: the wheel's kernel symbols name ``c10::Float8_e4m3fn`` as DST_DTYPE; its constructor
  from float is the conversion torch's CPU cast calls, so the cast here is torch's.
"""

from __future__ import annotations

import torch


def _f32(t: torch.Tensor) -> torch.Tensor:
    """Round float64 values to fp32, kept in float64."""
    return t.to(torch.float32).to(torch.float64)


def _fmaxf(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C's fmaxf: the larger operand, or the other one where one is NaN."""
    return torch.where(torch.isnan(a), b, torch.where(torch.isnan(b), a, torch.maximum(a, b)))


def _fminf(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isnan(a), b, torch.where(torch.isnan(b), a, torch.minimum(a, b)))


def _power_of_two_up(y_s: torch.Tensor) -> torch.Tensor:
    """The register kernels' UE8M0 step on positive fp32 scales held in float64."""
    bits = y_s.to(torch.float32).view(torch.int32).to(torch.int64)
    exponent, mantissa = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    rounded = ((exponent + (mantissa != 0).to(torch.int64)) << 23).to(torch.int32)
    return rounded.view(torch.float32).to(torch.float64)


def per_token_group_fp8_quant(
    x: torch.Tensor,
    group_size: int,
    eps: float,
    fp8_min: float,
    fp8_max: float,
    scale_ue8m0: bool,
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q in `out_dtype` shaped like x, fp32 scales (..., K / group_size)) as the kernel writes them."""
    values = x.to(torch.float32).to(torch.float64)  # static_cast<float>(src): exact from bf16/fp16/fp32
    groups = values.reshape(*values.shape[:-1], values.shape[-1] // group_size, group_size)
    eps32, min32, max32 = (_f32(torch.tensor(v, dtype=torch.float64)) for v in (eps, fp8_min, fp8_max))
    magnitude = groups.abs()
    # fmaxf over eps and every |x|: NaN elements lose to any number
    amax = _fmaxf(eps32.expand(groups.shape[:-1]), torch.where(torch.isnan(magnitude), -1.0, magnitude).amax(dim=-1))
    y_s = _f32(amax / max32)
    if scale_ue8m0:
        y_s = _power_of_two_up(_fmaxf(y_s.abs(), _f32(torch.tensor(1e-10, dtype=torch.float64))))
        scaled = _f32(groups * _f32(1.0 / y_s).unsqueeze(-1))
    else:
        scaled = _f32(groups / y_s.unsqueeze(-1))
    q = _fminf(_fmaxf(scaled, min32), max32)
    return q.to(torch.float32).to(out_dtype).reshape(x.shape), y_s.to(torch.float32)
