"""Adapters that call AMD's real aiter GEMMs when ``import aiter`` succeeds on ROCm.

Elsewhere they report themselves unavailable with the reason. They keep the emulations' contracts
(the same capability flags, the same load-time shuffle, the same recorded violations); only the
GEMM itself runs in aiter. Activations are quantized in torch with the "aiter-hip" flavor, byte-exact
with the HIP group quant vLLM calls before these GEMMs.
aiter is a ROCm-only source install (github.com/ROCm/aiter); the unrelated PyPI package named
``aiter`` is detected and refused.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import torch

from ..implementations import Check
from ..layouts import QuantizedActivation
from .aiter_emulated import AiterBlockscaleEmulated, AiterBpreshuffleEmulated
from .base import Contract, register_kernel

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear


def _aiter_op(op: str):
    """The aiter function `op`, or raise ImportError saying why it is not usable here."""
    if not getattr(torch.version, "hip", None):
        raise ImportError(f"aiter needs a ROCm build of torch (this is torch {torch.__version__})")
    try:
        module = importlib.import_module("aiter")
    except Exception as err:  # aiter's import compiles and probes the GPU; any failure means unusable
        raise ImportError(f"import aiter failed: {err}") from err
    fn = getattr(module, op, None)
    if fn is None:
        raise ImportError(f"the installed 'aiter' has no {op}; it is not AMD's aiter (install ROCm/aiter from source)")
    return fn


PLAIN_OP = "gemm_a8w8_blockscale"


class _NativeMixin:
    op: str

    def availability(self, device: torch.device | None = None) -> Check:
        try:
            _aiter_op(self.op)
        except ImportError as err:
            return Check(False, str(err))
        if device is not None and torch.device(device).type != "cuda":
            return Check(False, f"aiter.{self.op} multiplies ROCm GPU tensors, not {torch.device(device).type} ones")
        return Check(True, f"aiter.{self.op} is importable")

    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        weight = linear.weight
        device = weight.data.device
        if device.type != "cuda":
            raise ValueError(f"{linear.name}: native aiter kernels need the weight on the GPU (it is on {device})")
        # A preshuffling kernel that honoured a direct-read flag multiplies with the plain GEMM.
        fn = _aiter_op(PLAIN_OP if linear.plain_fallback else self.op)
        # The raw buffers go in as they are: aiter reads their bytes in its own order.
        return fn(qa.data.to(device), weight.data, qa.scale.to(device), weight.scale, dtype=torch.bfloat16)


@register_kernel
class AiterBlockscaleNative(_NativeMixin, AiterBlockscaleEmulated):
    name = "aiter-native-blockscale"
    description = "AMD aiter gemm_a8w8_blockscale (real kernel, ROCm only)"
    vllm_name = None
    op = PLAIN_OP


@register_kernel
class AiterBpreshuffleNative(_NativeMixin, AiterBpreshuffleEmulated):
    name = "aiter-native-bpreshuffle"
    description = "AMD aiter gemm_a8w8_blockscale_bpreshuffle (real kernel, ROCm only)"
    vllm_name = None
    op = "gemm_a8w8_blockscale_bpreshuffle"
