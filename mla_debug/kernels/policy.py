"""Kernel selection per linear layer, the way vLLM does it at load time.

vLLM keeps a priority list per platform and picks, for each linear, the first kernel that is
supported and whose ``can_implement`` passes; ``VLLM_DISABLED_KERNELS`` removes kernels by class name
(every kernel modelling that class: `KernelPolicy.is_disabled`).
`KernelPolicy` is that list plus a disabled set, the tuned table the preshuffled kernel consults,
per-layer overrides, per-kernel options and aiter's Triton config table (which the vLLM 0.33 aiter kernels
consult). `choose` returns the kernel and a KernelChoice (the kernel's
name, the reason in words, what was skipped); `select` the same reason as one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..implementations import Check
from ..numerics import Fp8Format
from .base import GemmProblem, Kernel, get_kernel, kernel_class, vllm_class_of
from .choice import KernelChoice, SkippedKernel
from .platforms import Platform, platform
from .triton_configs import TritonConfigTable
from .tuned import TunedTable


def _canonical(name: str) -> str:
    return kernel_class(name).name


@dataclass
class KernelPolicy:
    """Ordered kernel priority, disabled kernels, tuned tables and per-layer overrides.

    ``tuned`` is aiter's CK bpreshuffle tuned table (default `TunedTable.default()`), ``triton_configs``
    aiter's Triton GEMM configs (default `TritonConfigTable.default()`); every GemmProblem carries both.

    >>> policy = md.KernelPolicy(["aiter-bpreshuffle", "aiter-blockscale"], tuned=md.kernels.TunedTable.embedded())
    >>> kernel, reason = policy.select("q_b_proj", 3072, 1536, md.platform("mi355x"))
    """

    priority: list[str]
    disabled: set[str] = field(default_factory=set)
    tuned: TunedTable | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    kernel_options: dict[str, dict] = field(default_factory=dict)
    triton_configs: TritonConfigTable | None = None

    def __post_init__(self) -> None:
        if isinstance(self.priority, str):
            raise TypeError("KernelPolicy.priority: give a list of kernel names, not one string")
        self.priority = [_canonical(name) for name in self.priority]
        if not self.priority:
            raise ValueError("KernelPolicy.priority: at least one kernel is needed")
        self.disabled = {_canonical(name) for name in parse_disabled(self.disabled)}
        self.overrides = {layer: _canonical(name) for layer, name in self.overrides.items()}
        self.kernel_options = {_canonical(name): dict(opts) for name, opts in self.kernel_options.items()}
        if self.tuned is None:
            self.tuned = TunedTable.default()
        if self.triton_configs is None:
            self.triton_configs = TritonConfigTable.default()

    @classmethod
    def for_platform(
        cls,
        plat: Platform | str,
        preshuffled_first: bool = True,
        native: bool | None = None,
        tuned: TunedTable | None = None,
        **kwargs,
    ) -> KernelPolicy:
        """vLLM-like default priority for a platform.

        ROCm: aiter-bpreshuffle (only if `preshuffled_first`, as since vLLM PR #51692), then
        aiter-blockscale, then the reference. NVIDIA: the same list with the Triton stand-ins
        (triton-bpreshuffle, triton-blockscale; cuBLAS is the ``nvidia-cublas`` scenario). CPU: the
        reference. `native=None` uses the real aiter ops when importable, the emulations otherwise.
        """
        plat = platform(plat)
        if plat.is_rocm:
            names = ["aiter-bpreshuffle", "aiter-blockscale"] if preshuffled_first else ["aiter-blockscale"]
            if native is None:
                native = get_kernel("aiter-native-blockscale").availability()[0]
            if native:
                names = [name.replace("aiter-", "aiter-native-") for name in names]
            names.append("torch-reference")
        elif plat.is_cuda:
            # The Triton stand-ins of the two aiter kernels: the ROCm choice (and its bugs) on NVIDIA.
            names = ["triton-bpreshuffle", "triton-blockscale"] if preshuffled_first else ["triton-blockscale"]
            names.append("torch-reference")
        else:
            names = ["torch-reference"]
        return cls(priority=names, tuned=tuned, **kwargs)

    def kernel(self, name: str) -> Kernel:
        """The kernel configured with its options; a stand-in (triton-bpreshuffle for aiter-bpreshuffle)
        takes the options given to the kernel it stands in for unless it has its own."""
        name = _canonical(name)
        stand_in = kernel_class(name).stands_in_for
        options = self.kernel_options.get(name, self.kernel_options.get(stand_in or "", {}))
        return get_kernel(name, **options)

    def is_disabled(self, name: str) -> bool:
        """Disabled by name, through the kernel it stands in for, or through its vLLM class.

        A kernel registered under a vLLM class name is that class, so disabling it (by either name)
        disables every kernel modelling the class, as ``VLLM_DISABLED_KERNELS`` does: vLLM 0.33's
        AiterFp8BlockScaledMMKernel takes aiter-blockscale, aiter-triton-blockscale and
        aiter-triton-bpreshuffle with it, and the native and Triton versions of a kernel go with it.
        """
        cls = kernel_class(name)
        if name in self.disabled or cls.stands_in_for in self.disabled:
            return True
        classes = {kernel_class(off).vllm_name for off in self.disabled} - {None}
        return vllm_class_of(cls) in classes

    def select(
        self, layer: str, n: int, k: int, plat: Platform | str, fmt: Fp8Format | None = None, m: int | None = None
    ) -> tuple[Kernel, str]:
        """The kernel for one linear (per-rank shape N x K) and why, in one line (``str`` of `choose`'s
        KernelChoice: ``"<kernel>: <reason>[; skipped ...]"``)."""
        kernel, choice = self.choose(layer, n, k, plat, fmt=fmt, m=m)
        return kernel, str(choice)

    def choose(
        self, layer: str, n: int, k: int, plat: Platform | str, fmt: Fp8Format | None = None, m: int | None = None
    ) -> tuple[Kernel, KernelChoice]:
        """The kernel for one linear (per-rank shape N x K) and the KernelChoice saying why, as data.
        Raises ValueError naming the layer, its shape and every kernel's refusal when none can take it."""
        plat = platform(plat)
        problem = GemmProblem(
            layer=layer,
            n=n,
            k=k,
            fmt=fmt or plat.fp8,
            platform=plat,
            tuned=self.tuned,
            m=m,
            triton_configs=self.triton_configs,
        )
        shape = f"{layer} (N={n}, K={k}) on {plat.name}"
        if layer in self.overrides:
            kernel = self.kernel(self.overrides[layer])
            ok, why = self._check(kernel, problem)
            if not ok:
                raise ValueError(f"{shape}: the override to {kernel.name} cannot be honoured: {why}")
            return kernel, KernelChoice(kernel.name, why, override=True)
        skipped: list[SkippedKernel] = []
        for name in self.priority:
            if self.is_disabled(name):
                skipped.append(SkippedKernel(name, disabled=True))
                continue
            kernel = self.kernel(name)
            ok, why = self._check(kernel, problem)
            if ok:
                return kernel, KernelChoice(kernel.name, why, skipped=tuple(skipped))
            skipped.append(SkippedKernel(name, reason=why))
        refusals = "; ".join(str(s) for s in skipped)
        raise ValueError(f"{shape}: no kernel in the priority list can implement it: {refusals}")

    @staticmethod
    def _check(kernel: Kernel, problem: GemmProblem) -> Check:
        available = kernel.availability()
        if not available.ok:
            return available
        return kernel.can_implement(problem)


def parse_disabled(spec: str | Iterable[str] | Mapping | None) -> list[str]:
    """Kernel names from a ``VLLM_DISABLED_KERNELS``-style comma list or an iterable of names."""
    if spec is None:
        return []
    if isinstance(spec, str):
        return [part.strip() for part in spec.split(",") if part.strip()]
    return [str(part) for part in spec]
