"""The linear layers of a model layer: quantized (a kernel's BlockScaledLinear) or dense (unquantized).

Both answer `run(x) -> LinearCall` and `read_direct(reader)`: the latter is how MLA's absorbed decode
(W_UK / W_UV from kv_b_proj) and DeepSeek-V4's grouped wo_a BMM read a weight outside any kernel - as
a plain (N, K) matrix of whatever bytes are there, recording a violation when they were re-laid out.
A reader that runs at load before the kernels process the weights (SGLang's ``post_load_weights``)
reads the bytes as they were then: ``read_direct(reader, before_kernel_load=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..kernels import BlockScaledLinear, KernelChoice, KernelPolicy, Platform, platform
from ..layouts import (
    ContractViolation,
    QuantizedActivation,
    QuantizedWeight,
    ScaleRead,
    WeightLayout,
    weight_read_violation,
)
from ..numerics import E4M3FN, E4M3FNUZ, e4m3fn_to_e4m3fnuz
from ..numerics.quantize import block_dequantize


@dataclass
class LinearCall:
    """One call of a linear: its output, the kernel that ran (by name), how it read the activation
    scale and which weight layout it read."""

    output: torch.Tensor
    kernel: str
    scale_layout: ScaleRead | None = None
    weight_layout: WeightLayout | None = None
    violations: list[ContractViolation] = field(default_factory=list)


class DenseLinear:
    """An unquantized weight (N, K): y = x @ W^T in fp32, returned in the input's dtype."""

    kernel_name = KernelChoice.dense().kernel

    def __init__(self, name: str, weight: torch.Tensor, **flags: bool) -> None:
        self.name = name
        self.weight = weight
        self.flags = flags
        self.events: list[str] = []

    @property
    def n(self) -> int:
        return self.weight.shape[0]

    @property
    def k(self) -> int:
        return self.weight.shape[1]

    def load(self, policy: KernelPolicy, plat: Platform | str) -> DenseLinear:
        return self

    def run(self, x: torch.Tensor) -> LinearCall:
        out = (x.to(torch.float32) @ self.weight.to(torch.float32).t()).to(x.dtype)
        return LinearCall(out, self.kernel_name, weight_layout=self.weight_layout)

    def read_direct(
        self, reader: str, before_kernel_load: bool = False
    ) -> tuple[torch.Tensor, ContractViolation | None]:
        return self.weight.to(torch.float32), None

    @property
    def weight_layout(self) -> WeightLayout:
        """A dense weight is never re-laid out: always plain."""
        return WeightLayout()

    def direct_read_layout(self, before_kernel_load: bool = False) -> WeightLayout:
        return WeightLayout()

    @property
    def kernel_choice(self) -> KernelChoice:
        return KernelChoice.dense()


class QuantizedLinear:
    """A block-quantized weight served through the kernel the policy picks at load."""

    def __init__(self, name: str, weight: QuantizedWeight, **flags: bool) -> None:
        self.name = name
        self.block = BlockScaledLinear(name, weight, **flags)
        # The weight as loaded, before any kernel processed it: what a reader running at load ahead
        # of the kernels sees (set again by `load` after a format conversion).
        self.loaded_weight = weight
        self._memo: tuple | None = None

    @property
    def n(self) -> int:
        return self.block.n

    @property
    def k(self) -> int:
        return self.block.k

    @property
    def events(self) -> list[str]:
        return self.block.events

    @property
    def kernel_name(self) -> str:
        return self.block.kernel.name if self.block.kernel else "unloaded"

    @property
    def kernel_choice(self) -> KernelChoice | None:
        """Why the policy chose this linear's kernel at load (None before loading)."""
        return self.block.kernel_choice

    def load(self, policy: KernelPolicy, plat: Platform | str) -> QuantizedLinear:
        """Convert the checkpoint's fp8 format to the platform's (vLLM on gfx942), then pick the kernel."""
        plat = platform(plat)
        weight = self.block.weight
        if weight.fmt != plat.fp8:
            if weight.fmt is E4M3FN and plat.fp8 is E4M3FNUZ:
                data, scale = e4m3fn_to_e4m3fnuz(weight.data, weight.scale)
                self.block.weight = QuantizedWeight(
                    data, scale, E4M3FNUZ, weight.layout, weight.block, weight.logical_k
                )
                self.block.events.append("converted e4m3fn -> e4m3fnuz at load (same bits, block scale x2)")
            else:
                raise ValueError(f"{self.name}: a {weight.fmt.name} weight cannot run on {plat.name} ({plat.fp8.name})")
        self.loaded_weight = self.block.weight
        self.block.load(policy, plat)
        return self

    def run(self, x, kernel=None) -> LinearCall:
        """Through the loaded kernel, or through `kernel` when the model calls one directly.

        A replicated linear is shared by the in-process ranks, which hand it the very same input
        tensor: the call is then computed once and reused.
        """
        # The memo holds the input and weight objects themselves (identity, not data pointers: a freed
        # tensor's address can be reused) and their version counters (in-place changes recompute).
        weight = self.block.weight
        memo = self._memo
        if (
            memo is not None
            and memo[0] is x
            and memo[1] is weight
            and memo[2] is kernel
            and memo[3] is self.block.kernel
            and all(t._version == v for t, v in memo[4])
        ):
            return memo[5]
        result = self._run(x, kernel)
        tensors = ((x.data, x.scale) if isinstance(x, QuantizedActivation) else (x,)) + (weight.data, weight.scale)
        self._memo = (x, weight, kernel, self.block.kernel, tuple((t, t._version) for t in tensors), result)
        return result

    def _run(self, x, kernel) -> LinearCall:
        call = kernel.run(self.block, x) if kernel is not None else self.block.run(x)
        return LinearCall(
            call.output,
            call.kernel,
            scale_layout=ScaleRead(call.input.scale_layout, call.scale_read_as),
            weight_layout=self.weight_layout,
            violations=list(call.violations),
        )

    @property
    def weight_layout(self) -> WeightLayout:
        """What has been done to the weight's bytes so far (every shuffle and pad, and by whom)."""
        return self.block.weight.layout

    def direct_read_layout(self, before_kernel_load: bool = False) -> WeightLayout:
        """The layout a direct reader finds: the weight's now, or as loaded when it reads ahead of the kernels."""
        return (self.loaded_weight if before_kernel_load else self.block.weight).layout

    def read_direct(
        self, reader: str, before_kernel_load: bool = False
    ) -> tuple[torch.Tensor, ContractViolation | None]:
        """fp32 (N, K) from the bytes as a plain matrix times the block scale, like
        vLLM's get_and_maybe_dequant_weights; a violation when those bytes were re-laid out.

        ``before_kernel_load`` reads the bytes as loaded, before the kernel's load-time processing:
        a reader at load that runs ahead of the kernels (SGLang's standard loader).
        """
        weight = self.loaded_weight if before_kernel_load else self.block.weight
        violation = weight_read_violation(
            reader, self.name, weight.layout, None, weight.k, weight.data.element_size(), direct_reader=True
        )
        data = weight.data[:, : weight.k] if weight.data.shape[1] != weight.k else weight.data
        return block_dequantize(data, weight.scale, weight.block), violation
