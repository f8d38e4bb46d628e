"""Named serving behaviours: a kernel policy recipe plus model-side behaviours, as data.

| name          | what it models |
|---------------|----------------|
| reference     | torch-reference kernel everywhere, correct layouts, unfused V4 norm: the yardstick |
| vllm-baseline | vLLM on ROCm before PR #51692: AiterFp8BlockScaledMM first; V4 fused norm+quant (ROW_MAJOR) and the V4 model's own preshuffle with direct bpreshuffle calls |
| vllm-pr51692  | the preshuffled kernel first (chosen per rank shape through the tuned table), flags ignored: the four defects of SEMANTICS 6 |
| vllm-pr56433  | the fix: flags honoured, consumers asked for their scale order, model skips its shuffle when the kernel preshuffled |
| nvidia-cublas | NVIDIA: cuBLAS blockwise scaled_mm (strict stride contract), reference where it cannot run |
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .kernels import KernelPolicy, Platform, TunedTable, platform
from .model.behaviour import ModelBehaviour


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    priority: tuple[str, ...] | None = None  # None: KernelPolicy.for_platform's vLLM-like default
    preshuffled_first: bool = True
    disabled: tuple[str, ...] = ()
    overrides: dict = field(default_factory=dict)
    kernel_options: dict = field(default_factory=dict)
    behaviour: ModelBehaviour = field(default_factory=ModelBehaviour)
    tuned_path: str | None = None

    def policy(self, plat: Platform | str, tuned: TunedTable | None = None) -> KernelPolicy:
        """The KernelPolicy this scenario uses on `plat`."""
        plat = platform(plat)
        if tuned is None:
            tuned = TunedTable.from_csv(self.tuned_path) if self.tuned_path else TunedTable.default()
        common = dict(
            disabled=set(self.disabled),
            tuned=tuned,
            overrides=dict(self.overrides),
            kernel_options={k: dict(v) for k, v in self.kernel_options.items()},
        )
        if self.priority is not None:
            return KernelPolicy(priority=list(self.priority), **common)
        return KernelPolicy.for_platform(plat, preshuffled_first=self.preshuffled_first, native=False, **common)


_V4_ROCM = dict(v4_fused_norm_quant=True, v4_fused_transpose_scale=False, v4_model_preshuffle=True)

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("reference", "torch-reference everywhere, correct layouts", priority=("torch-reference",)),
        Scenario(
            "vllm-baseline",
            "vLLM on ROCm before PR #51692 (AiterFp8BlockScaledMM first)",
            preshuffled_first=False,
            behaviour=ModelBehaviour(**_V4_ROCM),
        ),
        Scenario(
            "vllm-pr51692",
            "vLLM PR #51692: preshuffled aiter GEMM first, layer flags ignored",
            kernel_options={"aiter-bpreshuffle": {"honour_layer_flags": False}},
            behaviour=ModelBehaviour(**_V4_ROCM),
        ),
        Scenario(
            "vllm-pr56433",
            "vLLM PR #56433: flags honoured, consumers asked, no model-side double shuffle",
            kernel_options={"aiter-bpreshuffle": {"honour_layer_flags": True}},
            behaviour=ModelBehaviour(**_V4_ROCM, v4_ask_consumers=True, skip_model_shuffle_if_kernel_preshuffles=True),
        ),
        Scenario(
            "nvidia-cublas", "NVIDIA: cuBLAS blockwise scaled_mm", priority=("cublas-blockwise", "torch-reference")
        ),
    )
}


def scenario(spec: str | Scenario) -> Scenario:
    """A named scenario, or a Scenario passed through; the error lists the valid names."""
    if isinstance(spec, Scenario):
        return spec
    if isinstance(spec, str) and spec in SCENARIOS:
        return SCENARIOS[spec]
    raise ValueError(f"unknown scenario {spec!r}; valid: {', '.join(SCENARIOS)}")
