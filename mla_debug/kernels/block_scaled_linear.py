"""A block-scaled FP8 linear layer as a serving engine holds it: bytes, scale, flags, chosen kernel.

The direct-read flags mirror vLLM's: ``skip_weight_relayout`` (set by MLA on kv_b_proj, whose raw weight
absorbed decode reads directly), ``is_bmm`` (DeepSeek-V4's wo_a, read as a grouped BMM) and the older CPU
spelling ``_cpu_skip_gemm_dispatch``. ``keep_plain_weight_layout`` is SGLang's flag for the same need
(SGLang 0.5.23 ``models/deepseek_v4.py`` sets it on wo_a; ``layers/quantization/fp8.py``
``process_weights_after_loading`` then leaves the weight unshuffled); vLLM's kernels never read it.
``aiter_bpreshuffled`` is the other direction: set by a kernel that shuffled the weight at load (vLLM 0.33
``AiterFp8BlockScaledMMKernel.process_weights_after_loading``, SGLang's fp8.py), read by the DeepSeek-V4
model to skip its own shuffle. Whether a kernel honours a flag is the kernel's business; the linear only
records them, and records every transform applied to its weight and by whom.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..layouts import QuantizedActivation, QuantizedWeight
from ..layouts.weight_shuffle import ShuffleLayout
from .choice import KernelChoice

if TYPE_CHECKING:
    from .base import GemmCall, Kernel
    from .platforms import Platform
    from .policy import KernelPolicy


class BlockScaledLinear:
    """One linear layer (per rank) with a 128x128 block-quantized weight (N, K)."""

    def __init__(
        self,
        name: str,
        weight: QuantizedWeight,
        *,
        skip_weight_relayout: bool = False,
        is_bmm: bool = False,
        cpu_skip_gemm_dispatch: bool = False,
        keep_plain_weight_layout: bool = False,
        scale_fmt: str | None = None,
    ) -> None:
        if not isinstance(weight, QuantizedWeight):
            raise TypeError(f"{name}: weight must be a QuantizedWeight, got {type(weight).__name__}")
        self.name = name
        self.weight = weight
        # The checkpoint's quantization_config.scale_fmt (None, or "ue8m0": power-of-two block scales), which
        # an engine may pass on to the kernel's input quant (`Kernel.input_ue8m0`).
        self.scale_fmt = scale_fmt
        self.skip_weight_relayout = skip_weight_relayout
        self.is_bmm = is_bmm
        self._cpu_skip_gemm_dispatch = cpu_skip_gemm_dispatch
        self.keep_plain_weight_layout = keep_plain_weight_layout
        # Set by a kernel that shuffled the weight at load (`kernel_preshuffle`), never by the model.
        self.aiter_bpreshuffled = False
        # The serving platform `load` chose the kernel for (None for a kernel attached by hand).
        self.platform: Platform | None = None
        self.kernel: Kernel | None = None
        self.kernel_choice: KernelChoice | None = None  # why the kernel was chosen, as data
        self.kernel_reason = "not loaded"  # the same in one line
        # Set by a preshuffling kernel that honoured a direct-read flag and kept the plain GEMM.
        self.plain_fallback = False
        self.events: list[str] = []
        self.read_cache: dict = {}

    # -- shape and flags --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.weight.n

    @property
    def k(self) -> int:
        return self.weight.k

    @property
    def reads_weight_directly(self) -> bool:
        """Whether something outside the kernel reads this weight's bytes, by vLLM's three flags (SGLang's
        ``keep_plain_weight_layout`` is separate: vLLM kernels do not read it)."""
        return self.skip_weight_relayout or self.is_bmm or self._cpu_skip_gemm_dispatch

    @property
    def direct_read_flags(self) -> list[str]:
        names = {
            "skip_weight_relayout": self.skip_weight_relayout,
            "is_bmm": self.is_bmm,
            "_cpu_skip_gemm_dispatch": self._cpu_skip_gemm_dispatch,
        }
        return [flag for flag, on in names.items() if on]

    @property
    def layer_flags(self) -> list[str]:
        """Every flag set on the layer, vLLM's and SGLang's (for display)."""
        return self.direct_read_flags + (["keep_plain_weight_layout"] if self.keep_plain_weight_layout else [])

    # -- load -------------------------------------------------------------------------------------
    def load(self, policy: KernelPolicy, platform: Platform | str) -> BlockScaledLinear:
        """Choose a kernel through `policy` and let it re-lay out the weight (vLLM's load step)."""
        from .platforms import platform as get_platform

        plat = get_platform(platform)
        kernel, choice = policy.choose(self.name, self.n, self.k, plat, fmt=self.weight.fmt)
        self.platform = plat
        self.attach(kernel, choice)
        return self

    def attach(self, kernel: Kernel, reason: str | KernelChoice = "attached directly") -> BlockScaledLinear:
        """Use `kernel` for this linear and run its load-time weight processing; `reason` is why (a
        policy's KernelChoice, or words for a kernel attached by hand)."""
        self.kernel = kernel
        self.kernel_choice = reason if isinstance(reason, KernelChoice) else KernelChoice(kernel.name, reason)
        self.kernel_reason = str(reason)
        self.events.append(f"kernel {kernel.name}: {reason}")
        kernel.process_weights_after_loading(self)
        return self

    def shuffle_weight(self, layout: ShuffleLayout = (16, 16), by: str = "model") -> None:
        """Shuffle the weight's bytes once more (as a kernel or a model-side preshuffle does), recorded."""
        self.weight = self.weight.shuffled(layout, by=by)
        self.read_cache.clear()
        self.events.append(f"weight shuffled {tuple(layout)} by {by}")

    def kernel_preshuffle(self, layout: ShuffleLayout, by: str) -> None:
        """A kernel's load-time shuffle: shuffle once more and set ``aiter_bpreshuffled``, the flag vLLM 0.33
        and SGLang 0.5.23 set after shuffling so that the model does not shuffle again."""
        self.shuffle_weight(layout, by=by)
        self.aiter_bpreshuffled = True

    # -- run --------------------------------------------------------------------------------------
    def run(self, x: torch.Tensor | QuantizedActivation) -> GemmCall:
        if self.kernel is None:
            raise RuntimeError(f"{self.name}: no kernel attached; call load(policy, platform) or attach(kernel)")
        return self.kernel.run(self, x)

    def __call__(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        return self.run(x).output

    def __repr__(self) -> str:
        kernel = self.kernel.name if self.kernel else "unloaded"
        flags = ",".join(self.layer_flags) or "no flags"
        return (
            f"<BlockScaledLinear {self.name} (N={self.n}, K={self.k}) {kernel}; {flags}; weight {self.weight.layout}>"
        )
