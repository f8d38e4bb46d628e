"""The block-scaled GEMM kernel interface and its registry.

A kernel reads bytes the way the real kernel does: the emulation of aiter's preshuffled GEMM reads
COL_MAJOR scale bytes whatever it is handed, exactly like the hardware. That is what makes silent
layout bugs reproducible on any machine. Every call returns a `GemmCall` holding the output and the
layout contracts the call broke.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch

from .._checks import describe, require_floating, require_tensor
from ..implementations import Check, Registry
from ..layouts import (
    ContractViolation,
    QuantizedActivation,
    ScaleLayout,
    quantize_groups,
    scale_order_violation,
    weight_read_violation,
)
from ..layouts.weight_shuffle import ShuffleLayout
from ..numerics import Fp8Format

if TYPE_CHECKING:
    from .block_scaled_linear import BlockScaledLinear
    from .platforms import Platform
    from .triton_configs import TritonConfigTable
    from .tuned import TunedTable


# What every kernel implements (the `operation` of the implementation-choice mechanism).
GEMM = "block-scaled FP8 GEMM"
# A checkpoint's quantization_config.scale_fmt for power-of-two block scales (DeepSeek-V3.1 on).
UE8M0_SCALE_FMT = "ue8m0"


@dataclass(frozen=True)
class GemmProblem:
    """What a kernel is asked to implement for one linear layer (per rank), as served on `platform`
    (the modelled serving platform, not the machine this runs on: that is `Kernel.availability`'s).

    ``tuned`` is aiter's CK bpreshuffle tuned table, ``triton_configs`` aiter's arch-keyed Triton GEMM
    configs: the two tables the engines consult before routing a layer to an aiter kernel.
    """

    layer: str
    n: int
    k: int
    fmt: Fp8Format
    platform: Platform
    tuned: TunedTable | None = None
    m: int | None = None
    triton_configs: TritonConfigTable | None = None


@dataclass
class GemmCall:
    """One kernel call: its output and what it read, including the contracts it broke."""

    output: torch.Tensor
    kernel: str
    input: QuantizedActivation
    scale_read_as: ScaleLayout
    weight_read_as: ShuffleLayout | None
    violations: list[ContractViolation] = field(default_factory=list)


@dataclass(frozen=True)
class Contract:
    """The bytes a kernel reads for one linear: activation-scale order and weight shuffle."""

    scale: ScaleLayout
    weight: ShuffleLayout | None


class Kernel(ABC):
    """A block-scaled FP8 GEMM: y (M, N) bf16 = x (M, K) @ W(N, K)^T with 1x128 / 128x128 scales.

    An `implementations.Implementation` of `GEMM`: registered by class (`register_kernel`), chosen by
    `KernelPolicy` from `availability` and `can_implement`.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    operation: ClassVar[str] = GEMM
    wants_transposed_act_scale: ClassVar[bool] = False
    preshuffles_weight: ClassVar[bool] = False
    # vLLM's class name, registered as an alias so VLLM_DISABLED_KERNELS-style lists can name the kernel
    # either way; one kernel per class name (the one a user means by the class).
    vllm_name: ClassVar[str | None] = None
    # The vLLM class this kernel is one backend of, where that is not its own alias: vLLM 0.33's
    # AiterFp8BlockScaledMMKernel chooses among three backends, each a kernel here. None: the first
    # vllm_class / vllm_name up the class hierarchy (`vllm_class_of`).
    vllm_class: ClassVar[str | None] = None
    # The kernel whose contract this one reproduces on other hardware (its options and disabling apply).
    stands_in_for: ClassVar[str | None] = None
    # The activation-scale presentation this kernel reads (and its own input quantization writes).
    act_scale_layout: ClassVar[ScaleLayout] = ScaleLayout.ROW_MAJOR
    # True for readers that decode the scale with the layout its producer declared (the reference);
    # false for kernels that read raw bytes in their own fixed order.
    reads_declared_scale_layout: ClassVar[bool] = False
    # Whether the input quant rounds its scales up to powers of two (ue8m0); DeepGEMM sets it per instance.
    ue8m0: bool = False
    # Whether the input quant also does so for a checkpoint whose quantization_config.scale_fmt is "ue8m0"
    # (the engine binds the checkpoint's scale format to the call: SGLang 0.5.23's act_scale_ue8m0).
    follow_scale_fmt: bool = False

    def __init__(self, flavor: str = "aiter") -> None:
        self.flavor = flavor

    def __repr__(self) -> str:
        return f"<kernel {self.name}>"

    # -- capability -------------------------------------------------------------------------------
    def availability(self, device: torch.device | None = None) -> Check:
        """Whether this kernel's code can run in this Python process (hardware, libraries), on tensors
        on `device` when one is given."""
        return Check(True, "pure torch; runs anywhere")

    def can_implement(self, problem: GemmProblem) -> Check:
        """Whether this kernel takes this problem on its platform, with the reason in words."""
        if problem.k % 128:
            return Check(False, f"K={problem.k} is not a multiple of 128")
        return Check(True, "takes this shape (K is a multiple of 128)")

    # -- load time --------------------------------------------------------------------------------
    def process_weights_after_loading(self, linear: BlockScaledLinear) -> None:
        """Re-lay out the linear's weight for this kernel (default: nothing)."""

    def contract(self, linear: BlockScaledLinear) -> Contract:
        """What this kernel reads for `linear` (may depend on what happened at load)."""
        return Contract(scale=self.act_scale_layout, weight=None)

    # -- run time ---------------------------------------------------------------------------------
    def input_ue8m0(self, linear: BlockScaledLinear) -> bool:
        """Whether this kernel's own input quant for `linear` takes power-of-two scales: always with
        ``ue8m0``; with ``follow_scale_fmt`` when the linear's checkpoint declares ``scale_fmt`` "ue8m0"."""
        return self.ue8m0 or (self.follow_scale_fmt and linear.scale_fmt == UE8M0_SCALE_FMT)

    def quantize_input(
        self, x: torch.Tensor, fmt: Fp8Format, scale_layout: ScaleLayout | None = None, ue8m0: bool | None = None
    ) -> QuantizedActivation:
        """Quantize x (M, K) per 1x128 the way this kernel's caller does, in the scale order it reads;
        `ue8m0` (None: the kernel's own ``ue8m0``) rounds the scales up to powers of two."""
        return quantize_groups(
            x,
            128,
            fmt=fmt,
            flavor=self.flavor,
            scale_layout=scale_layout or self.act_scale_layout,
            ue8m0=self.ue8m0 if ue8m0 is None else ue8m0,
            producer=f"{self.name} input quant",
        )

    def run(self, linear: BlockScaledLinear, x: torch.Tensor | QuantizedActivation) -> GemmCall:
        """Quantize (unless given a QuantizedActivation) and multiply, recording broken contracts."""
        lead: tuple[int, ...] = ()
        if isinstance(x, QuantizedActivation):
            qa = x
        else:
            require_tensor(f"{linear.name} input", x)
            require_floating(f"{linear.name} input", x)
            if x.dim() < 1 or x.shape[-1] != linear.k:
                raise ValueError(
                    f"{linear.name} input: {describe(x)} must have last dimension K={linear.k} "
                    f"to multiply by the weight (N, K) = ({linear.n}, {linear.k})"
                )
            lead = tuple(x.shape[:-1])
            qa = self.quantize_input(
                x.reshape(-1, linear.k), linear.weight.fmt, self.contract(linear).scale, self.input_ue8m0(linear)
            )
        self._check_quantized(linear, qa)
        contract = self.contract(linear)
        violations = self.contract_violations(linear, qa, contract)
        out = self.compute(linear, qa, contract)
        if lead:
            out = out.reshape(*lead, linear.n)
        return GemmCall(out, self.name, qa, self.scale_layout_read(qa, contract), contract.weight, violations)

    def apply(self, linear: BlockScaledLinear, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        return self.run(linear, x).output

    def scale_layout_read(self, qa: QuantizedActivation, contract: Contract) -> ScaleLayout:
        """The order in which this call reads `qa`'s scale bytes: the contract's fixed order for raw-pointer
        readers; a kernel that follows the tensor's strides overrides this."""
        return contract.scale

    def contract_violations(
        self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract | None = None
    ) -> list[ContractViolation]:
        """Contracts this call breaks: scale bytes read in another order, weight bytes in another layout."""
        contract = contract or self.contract(linear)
        found = [
            None
            if self.reads_declared_scale_layout
            else scale_order_violation(
                self.name,
                linear.name,
                qa.scale_layout,
                self.scale_layout_read(qa, contract),
                qa.m,
                qa.groups,
            ),
            weight_read_violation(
                self.name,
                linear.name,
                linear.weight.layout,
                contract.weight,
                linear.k,
                linear.weight.data.element_size(),
            ),
        ]
        return [v for v in found if v is not None]

    @abstractmethod
    def compute(self, linear: BlockScaledLinear, qa: QuantizedActivation, contract: Contract) -> torch.Tensor:
        """The GEMM itself, reading bytes per `contract`; returns bf16 (M, N)."""

    def _check_quantized(self, linear: BlockScaledLinear, qa: QuantizedActivation) -> None:
        if qa.k != linear.k:
            raise ValueError(
                f"{linear.name}: quantized input {describe(qa.data)} has K={qa.k}, the weight has K={linear.k}"
            )
        if qa.fmt != linear.weight.fmt:
            raise TypeError(
                f"{linear.name}: input is {qa.fmt.name} but the weight is {linear.weight.fmt.name}; "
                "their bit patterns are not interchangeable"
            )
        if qa.group_size != 128:
            raise ValueError(f"{linear.name}: block-scaled kernels take 1x128 input groups, got 1x{qa.group_size}")


# Every kernel class by name (and vLLM class name): the implementation-choice mechanism shared with the
# norm+quant backends, so scenario files, policies and the command line name kernels one way.
KERNELS: Registry[type[Kernel]] = Registry(GEMM, "kernel")


def register_kernel(cls: type[Kernel]) -> type[Kernel]:
    """Class decorator adding a kernel to the registry under its `name` (and its `vllm_name`)."""
    KERNELS.register(cls.name, cls, aliases=(cls.vllm_name,) if cls.vllm_name else ())
    return cls


def kernel_names() -> list[str]:
    return KERNELS.names()


def vllm_class_of(kernel: str | type[Kernel]) -> str | None:
    """The vLLM class a kernel is, or is one backend of, or (a native aiter kernel, a Triton stand-in)
    inherits from the kernel it reproduces: what ``VLLM_DISABLED_KERNELS`` switches it off by."""
    cls = kernel_class(kernel) if isinstance(kernel, str) else kernel
    for klass in cls.__mro__:
        name = klass.__dict__.get("vllm_class") or klass.__dict__.get("vllm_name")
        if name:
            return name
    return None


def kernels_of_vllm_class(vllm_class: str) -> list[str]:
    """Every registered kernel that models the vLLM class `vllm_class` (sorted): what disabling it removes.

    >>> md.kernels.kernels_of_vllm_class("AiterFp8BlockScaledMMKernel")   # CK, aiter Triton, Triton preshuffle, ...
    """
    return [name for name in kernel_names() if vllm_class_of(name) == vllm_class]


def kernel_class(name: str) -> type[Kernel]:
    """The kernel class registered under `name` or vLLM class name; a ValueError listing them otherwise."""
    return KERNELS.get(name)


def get_kernel(name: str, **options) -> Kernel:
    """A kernel instance by name (or vLLM class name), configured with `options`.

    >>> md.get_kernel("aiter-bpreshuffle").wants_transposed_act_scale
    True
    """
    cls = kernel_class(name)
    try:
        return cls(**options)
    except TypeError as err:
        raise TypeError(f"kernel {cls.name!r}: bad options {sorted(options)} ({err})") from None
