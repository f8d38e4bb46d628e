"""What the Triton norm + quant launchers share: availability, kernel loading, recipes, launch heuristics.

Triton is imported only when a Triton backend is asked for on a device it can serve, so the library
imports (and the torch backend runs) on machines without Triton. Where Triton runs:

- CUDA (and ROCm) tensors: compiled kernels.
- CPU tensors: only under Triton's own interpreter switch ``TRITON_INTERPRET=1`` (numpy, slow: tiny
  shapes). The switch is Triton's; it is read here the way ``triton.jit`` reads it, because it
  decides whether ``triton.jit`` compiles or interprets a kernel.

The kernel module is loaded once per mode: ``triton.jit`` picks compiled or interpreted when it
decorates, so the interpreted copy is a second module object under a name of its own.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import warnings
from dataclasses import dataclass
from types import ModuleType

import torch

from ...layouts import ScaleLayout
from ...numerics import E4M3FN, E4M3FNUZ, Fp8Format, QuantFlavor
from ...numerics.quantize import Fp8OverflowWarning, _tie_rounds_up, overflow_threshold
from .. import triton_env
from ..launch_names import launch_name
from ..triton_env import interpreting

_KERNELS = f"{__package__}.kernels"


def triton_unavailable_reason(device: torch.device) -> str | None:
    """None when the Triton backends can run on tensors on `device`, else why not."""
    if device.type not in ("cuda", "cpu"):
        return f"Triton runs on CUDA GPUs (and on the CPU under TRITON_INTERPRET=1), not on {device.type} tensors"
    if device.type == "cpu" and not interpreting():
        return (
            "Triton compiles for CUDA GPUs and these tensors are on the CPU, where it runs only under its "
            "interpreter, which is off (set TRITON_INTERPRET=1 before importing triton; slow: tiny shapes only)"
        )
    return triton_env.import_error() or triton_env.interpreter_error()


def triton_interpreted_on(device: torch.device) -> bool:
    """Where Triton runs only through its interpreter: CPU tensors, and every tensor while it is on."""
    return device.type == "cpu" or interpreting()


def require_triton(op: str, device: torch.device) -> None:
    reason = triton_unavailable_reason(device)
    if reason is not None:
        raise RuntimeError(f"{op}: the Triton backend cannot run on {device} tensors here: {reason}")


@functools.lru_cache(maxsize=2)
def _load_kernels(interpret: bool) -> ModuleType:
    if not interpret:
        return importlib.import_module(_KERNELS)
    # A second copy of the source, decorated while TRITON_INTERPRET=1, under a name of its own
    name = f"{_KERNELS}_interpreted"
    spec = importlib.util.find_spec(_KERNELS)
    assert spec is not None and spec.origin is not None
    module_spec = importlib.util.spec_from_file_location(name, spec.origin)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def kernels() -> ModuleType:
    """The kernel module for the current mode (interpreted when TRITON_INTERPRET=1, else compiled)."""
    return _load_kernels(interpreting())


@dataclass(frozen=True)
class QuantConstants:
    """A flavor's recipe for one fp8 format: the quant kernels' compile-time constant QUANT."""

    FNUZ: bool
    FMT_MAX: float
    FLOOR: float
    MUL_RECIP: bool
    CLAMP: bool
    COUNT_OVF: bool
    OVF_AT: float
    OVF_TIE_UP: bool
    INV_MAX: float  # > 0: the scale is amax * INV_MAX (fp32(1/max), the times_inverse_max rule)
    AMAX_DROPS_NAN: bool


def quant_constants(fmt: Fp8Format, flavor: QuantFlavor) -> QuantConstants:
    # The same recipe as numerics.quantize._scaled_cast (ue8m0 is never used by this op).
    return QuantConstants(
        FNUZ=fmt == E4M3FNUZ,
        FMT_MAX=float(flavor.fmt_max(fmt)),
        FLOOR=float(flavor.group_amax_floor),
        MUL_RECIP=flavor.quotient == "mul_reciprocal",
        # The e4m3fn conversions (cvt.rn.satfinite, and the kernels' integer one) saturate to +-448 and keep
        # NaN, exactly what clamping to +-448 first gives; skipping that clamp saves two instructions per
        # value in a kernel whose speed is its instruction count.
        CLAMP=flavor.clamp and not (fmt == E4M3FN and flavor.fmt_max(fmt) == 448.0),
        # A clamping flavor cannot overflow; only the others count (and pay one device sync for it).
        COUNT_OVF=not flavor.clamp,
        OVF_AT=float(overflow_threshold(fmt)),
        OVF_TIE_UP=_tie_rounds_up(fmt),
        # fp32(1/max) as the number the fp32 kernel multiplies by; 0 selects the correctly rounded division
        INV_MAX=float(torch.tensor(1.0 / flavor.fmt_max(fmt), dtype=torch.float32))
        if flavor.scale_rule == "times_inverse_max"
        else 0.0,
        AMAX_DROPS_NAN=flavor.amax_ignores_nan,
    )


def scale_strides(layout: ScaleLayout, m: int, groups: int) -> tuple[int, int]:
    """(stride of a row, stride of a group) at which a kernel writes scale (m, g) into an (M, G) buffer."""
    if layout is ScaleLayout.ROW_MAJOR:
        return groups, 1
    return 1, m  # COL_MAJOR ("view"): offset g*M + m


def report_overflows(counter: torch.Tensor | None, name: str, fmt: Fp8Format, flavor: QuantFlavor) -> int:
    """Read a kernel's overflow counter (a device sync) and warn as the torch quantizer does."""
    if counter is None:
        return 0
    count = int(counter.item())
    if count:
        effect = "NaN" if fmt == E4M3FNUZ else f"+-{fmt.max:g} (saturated)"
        warnings.warn(
            f"{name}: {count} finite values exceeded the {fmt.name} range under flavor "
            f"'{flavor.name}' (fmt max {flavor.fmt_max(fmt):g}) and became {effect}",
            Fp8OverflowWarning,
            stacklevel=4,
        )
    return count


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class RowLaunch:
    """Rows per program and warps of a row-wise norm/quant launch."""

    block_m: int
    num_warps: int
    k_with_q: bool = False  # fused kernel: one program per row block does q then k (else one each)
    # Few programs: time is one thread's dependent chain, so the norm loads its weights with the row and
    # shortens the fp64 sum's chain, spending registers that launches with many programs need for
    # occupancy (kernels' SHORT_CHAIN; the bytes are the same either way).
    short_chain: bool = False

    def __str__(self) -> str:
        return launch_name(f"BM{self.block_m}-w{self.num_warps}", (self.k_with_q, "-kq"), (self.short_chain, "-sc"))


def scales_in_place(device: torch.device, config: RowLaunch) -> bool:
    """Whether a quant launch stores its scales in place with inline PTX (kernels' SCALES_IN_PLACE): on
    NVIDIA GPUs (not ROCm, not the interpreter), for launches with few programs, whose time is one
    thread's chain. With many rows it ran slower than ``tl.store`` (RESULTS.md, "fused RMSNorm")."""
    nvidia = device.type == "cuda" and not getattr(torch.version, "hip", None) and not interpreting()
    return nvidia and config.short_chain


# Elements of the widest tile one program holds: with 16 fp32 values per thread the fused kernel
# compiles to 64-90 registers and no spills on sm_90 (ptxas of triton 3.6 and 3.9), which leaves room
# for 24-32 resident warps per SM - what a memory-bound kernel needs to keep loads in flight.
_ELEMENTS_PER_PROGRAM = 2048
_ELEMENTS_PER_THREAD = 16
_TARGET_WAVES = 4
_MANY_WAVES = 16


@functools.lru_cache(maxsize=4096)
def row_launch(width: int, m: int, sms: int) -> RowLaunch:
    """Heuristic launch configuration for rows `width` wide (padded to a power of two), M rows.

    Several narrow rows per program share one load of the weights; a wide row gets a program of its
    own with up to 16 warps. Rows per program shrink until there are `_TARGET_WAVES` programs per SM
    (decode-sized M), so few rows still spread over the GPU. Not autotuned: fitted on H200 sweeps of the
    DeepSeek-V4 widths (RESULTS.md, "What the tuning found").
    """
    padded = next_pow2(width)
    if padded >= 1024:
        # One row per program is fastest at every M for the DeepSeek-V4 widths. With many rows the kernel
        # is bound by instruction issue, not memory, so the fewest threads per row win (a thread's fixed
        # costs - reductions, correctly rounded divisions - are paid per row): one warp for up to 2048
        # values, and with many waves the k row in the q row's program. Few rows want short per-thread
        # chains instead: 8-16 values per thread, the weights loaded with the row and the fp64 sum added
        # pairwise first (short_chain).
        if m >= _TARGET_WAVES * sms:
            return RowLaunch(1, max(1, padded // 2048), k_with_q=m >= _MANY_WAVES * sms)
        return RowLaunch(1, max(4, padded // 512), short_chain=True)
    block_m = max(1, min(16, _ELEMENTS_PER_PROGRAM // padded))
    while block_m > 1 and -(-m // block_m) < _TARGET_WAVES * sms:
        block_m //= 2
    warps = max(1, min(16, block_m * padded // (32 * _ELEMENTS_PER_THREAD)))
    return RowLaunch(block_m, warps, short_chain=-(-m // block_m) < _TARGET_WAVES * sms)


def launch_for(m: int, widths: tuple[int, ...], device: torch.device) -> RowLaunch:
    """The launch of a kernel whose programs handle rows of the widest of `widths`."""
    return row_launch(max(widths), m, triton_env.sm_count(device))


def convert_values(x: torch.Tensor, fnuz: bool, soft: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' conversions of fp32 values `x` (1-D): (fp8 bytes as uint8, bf16) - to test them."""
    require_triton("convert_values", x.device)
    x = x.contiguous().to(torch.float32)
    fp8 = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    bf16 = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    block = 1024
    if x.numel():
        grid = (-(-x.numel() // block),)
        kernels().convert_kernel[grid](x, fp8, bf16, x.numel(), FNUZ=fnuz, SOFT=soft, BLOCK=block)
    return fp8, bf16
