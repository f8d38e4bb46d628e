"""A small engine profile as plain data, built from kernels and behaviour fields that exist today, for the
tests of the profile machinery (the shipped profiles are tested on their own: test_engine_profiles.py)."""

from __future__ import annotations

import copy

SOURCE = {"package": "vllm", "version": "0.33.0", "file": "vllm/envs.py", "function": "VLLM_ROCM_USE_AITER"}

PROFILE = {
    "name": "toy-engine",
    "description": "a toy engine: aiter on ROCm behind a switch, the preshuffled GEMM behind a second one",
    "engine": {"name": "vLLM", "version": "0.33.0"},
    "priority": ["torch-reference"],
    "settings": {
        "USE_AITER": {
            "kind": "env",
            "default": "0",
            "values": ["0", "1"],
            "says": "aiter on ROCm",
            "source": SOURCE,
        },
        "USE_PRESHUFFLE": {
            "kind": "env",
            "default": "1",
            "values": ["0", "1"],
            "says": "the preshuffled GEMM first",
            "source": SOURCE,
        },
        "--level": {
            "kind": "arg",
            "default": "2",
            "values": ["0", "1", "2"],
            "says": "a server argument",
            "source": SOURCE,
        },
        "hip": {"kind": "fact", "default": "7.2", "values": ["7.0", "7.2"], "says": "a fact", "source": SOURCE},
    },
    "rules": [
        {
            "id": "rocm-list",
            "says": "aiter's plain GEMM first when aiter is on",
            "when": {"vendor": "amd", "settings": {"USE_AITER": "1"}},
            "then": {"priority": ["aiter-blockscale", "torch-reference"], "disabled": ["triton-blockscale"]},
            "source": SOURCE,
        },
        {
            "id": "rocm-preshuffle",
            "says": "the preshuffled GEMM first, layer flags ignored",
            "when": {"vendor": "amd", "arch": ["gfx950"], "settings": {"USE_AITER": "1", "USE_PRESHUFFLE": "1"}},
            "then": {
                "priority": ["aiter-bpreshuffle", "aiter-blockscale", "torch-reference"],
                "kernel_options": {"aiter-bpreshuffle": {"honour_layer_flags": False}},
                "disabled": ["triton-bpreshuffle"],
            },
            "source": SOURCE,
        },
        {
            "id": "fused-producer",
            "says": "the V4 fused producer",
            "when": {"platform": ["mi355x", "mi308x"], "settings": {"--level": ["1", "2"]}},
            "then": {"behaviour": {"v4_fused_norm_quant": True}},
            "source": SOURCE,
        },
        {
            "id": "nvidia",
            "says": "cuBLAS on NVIDIA",
            "when": {"vendor": "nvidia"},
            "then": {
                "priority": ["cublas-blockwise", "torch-reference"],
                "overrides": {"kv_b_proj": "torch-reference"},
            },
            "source": SOURCE,
        },
    ],
}


def profile(**changes) -> dict:
    """A deep copy of PROFILE with top-level keys replaced."""
    data = copy.deepcopy(PROFILE)
    data.update(changes)
    return data
