"""The built-in seed scenarios, and `scenario(spec)` to get any scenario by name, dict, file or value.

The built-ins are the seed scenarios the project started from: each models one vLLM pull request (or
the yardstick), not a release. Releases are modelled by the engine profiles shipped as data
(``data/engines/vllm-0.33.yaml``, ``sglang-0.5.23.yaml``; `lookup.py`), which `scenario` finds by name too.

| name          | what it models |
|---------------|----------------|
| reference     | torch-reference kernel everywhere, correct layouts, unfused V4 norm: the yardstick |
| vllm-baseline | vLLM on ROCm before PR #51692: AiterFp8BlockScaledMM first; V4 fused norm+quant (ROW_MAJOR) and the V4 model's own preshuffle with direct bpreshuffle calls |
| vllm-pr51692  | the preshuffled kernel first (chosen per rank shape through the tuned table), flags ignored: the four defects of docs/semantics.md §8; fixed by vllm-pr56433 |
| vllm-pr56433  | the fix: flags honoured, consumers asked for their scale order, model skips its shuffle when the kernel preshuffled |
| nvidia-cublas | NVIDIA: cuBLAS blockwise scaled_mm (strict stride contract), reference where it cannot run |

User-defined scenarios are data too: `Scenario.from_dict`, `Scenario.from_file` (YAML or JSON; the keys
are described in `mla_debug.scenarios.scenario_files`) and `scenario(spec)`, which takes a built-in or profile
name, a Scenario, a dict or a path to such a file::

    md.scenario("my-scenarios/ignore-flags.yaml")
    md.scenario({"name": "no-preshuffle", "base": "vllm-pr51692", "disabled": ["aiter-bpreshuffle"]})
"""

from __future__ import annotations

from .behaviour import ModelBehaviour
from .scenario import Scenario

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
            upstream="vLLM before PR #51692",
        ),
        Scenario(
            "vllm-pr51692",
            "vLLM PR #51692: preshuffled aiter GEMM first, layer flags ignored",
            kernel_options={"aiter-bpreshuffle": {"honour_layer_flags": False}},
            behaviour=ModelBehaviour(**_V4_ROCM),
            upstream="vLLM PR #51692",
            # docs/semantics.md §8: PR #56433 fixes the four defects of PR #51692.
            fixed_by="vllm-pr56433",
        ),
        Scenario(
            "vllm-pr56433",
            "vLLM PR #56433: flags honoured, consumers asked, no model-side double shuffle",
            kernel_options={"aiter-bpreshuffle": {"honour_layer_flags": True}},
            behaviour=ModelBehaviour(**_V4_ROCM, v4_ask_consumers=True, skip_model_shuffle_if_kernel_preshuffles=True),
            upstream="vLLM PR #56433",
        ),
        Scenario(
            "nvidia-cublas", "NVIDIA: cuBLAS blockwise scaled_mm", priority=("cublas-blockwise", "torch-reference")
        ),
    )
}
