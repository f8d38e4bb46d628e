"""Which kernel a linear runs and why, as data: what `KernelPolicy.select` decided at load time.

The kernel is a name and the reason a separate field, so analysis reads the kernel without parsing a
sentence. The reason itself stays in the words the kernels' ``can_implement`` give (they say which
tuned row matched, which rule a shape broke); ``str(choice)`` is the one-line form
``"<kernel>: <reason>"`` that `KernelPolicy.select` has always returned.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._json_records import JsonRecord

# The kernel name of an unquantized (dense) linear: no block-scaled kernel is chosen for it.
DENSE = "dense"
DENSE_REASON = "unquantized weight: no block-scaled kernel runs it"


@dataclass(frozen=True)
class SkippedKernel(JsonRecord):
    """A kernel of the priority list passed over before the chosen one: disabled (as
    ``VLLM_DISABLED_KERNELS`` does), or unable to take the problem (`reason`, in its own words)."""

    kernel: str
    disabled: bool = False
    reason: str | None = None

    def __str__(self) -> str:
        return f"{self.kernel} disabled" if self.disabled else f"{self.kernel} ({self.reason})"


@dataclass(frozen=True)
class KernelChoice(JsonRecord):
    """The kernel one linear got and why.

    ``kernel`` is the registered kernel name (``DENSE`` for an unquantized weight); ``reason`` says why
    that kernel takes the problem; ``override`` is True when a per-layer override named it; ``skipped``
    lists the kernels of higher priority passed over, in priority order.

    >>> choice = layer_run.kernels["kv_b_proj"]
    >>> choice.kernel, choice.reason   # ('aiter-bpreshuffle', 'tuned row for (N=..., K=...) on gfx950/cu256')
    """

    kernel: str
    reason: str
    override: bool = False
    skipped: tuple[SkippedKernel, ...] = ()

    @classmethod
    def dense(cls) -> KernelChoice:
        """The choice of an unquantized linear."""
        return cls(DENSE, DENSE_REASON)

    @property
    def is_dense(self) -> bool:
        return self.kernel == DENSE

    def __str__(self) -> str:
        if self.override:
            return f"{self.kernel}: per-layer override ({self.reason})"
        passed = f"; skipped {', '.join(str(s) for s in self.skipped)}" if self.skipped else ""
        return f"{self.kernel}: {self.reason}{passed}"
