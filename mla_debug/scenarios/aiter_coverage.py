"""Which vLLM 0.33.0 paths that the engine profile models cannot be checked against the pinned aiter.

The cross-checks run aiter's own code from one pinned release (amd-aiter 0.1.7.post2.dev18, `real_aiter`).
vLLM 0.33.0 imports some aiter modules that release does not have, so on those paths the profile's model
rests on reading - vLLM's call and aiter's config files - with no aiter code to run beside it. Each entry names
the vLLM path, the import the pinned aiter lacks (with vLLM's file and lines), and what runs in its place
here. tests/aiter_reference checks every claim against the installed aiter and the vLLM wheel.
"""

from __future__ import annotations

from dataclasses import dataclass

from .citations import Source

PINNED_AITER = "0.1.7.post2.dev18"  # real_aiter.PINNED_VERSION (a test holds them equal)


@dataclass(frozen=True)
class UncheckedPath:
    """A vLLM path whose aiter code is missing from the pinned release."""

    path: str  # what vLLM does there, in words
    module: str  # the aiter module vLLM imports
    name: str | None  # the name it imports from that module (None: the module itself is missing)
    source: Source  # vLLM's import, with its lines
    stands_in: str  # what the profile runs in its place

    def __str__(self) -> str:
        missing = f"{self.module}.{self.name}" if self.name else self.module
        return f"{self.path}: {missing} is not in amd-aiter {PINNED_AITER} ({self.source}); {self.stands_in}"


def _vllm(function: str, lines: str) -> Source:
    return Source("vllm", "0.33.0", "vllm/_aiter_ops.py", function, lines)


VLLM_0_33_UNCHECKED: tuple[UncheckedPath, ...] = (
    UncheckedPath(
        path=(
            "AiterFp8BlockScaledMMKernel's use_triton probe (is_triton_gemm_w8a8_tuned: a tuned "
            "GEMM-A8W8_BLOCKSCALE config at M=128)"
        ),
        module="aiter.ops.triton.utils.gemm_config_utils",
        name=None,
        source=_vllm("_triton_gemm_config_is_tuned", "241-247"),
        stands_in=(
            "the profile reads aiter's config files itself (kernels.TritonConfigTable, the pinned release's own "
            "JSON files by default) and applies the probe as vLLM words it (kernels.engine_rules)"
        ),
    ),
    UncheckedPath(
        path=(
            "AiterFp8BlockScaledMMKernel's use_bpreshuffle probe on gfx1250 (is_triton_blockscale_bpreshuffle_gemm_"
            "tuned: a tuned GEMM-A8W8_BLOCKSCALE_PRESHUFFLED config at M=1)"
        ),
        module="aiter.ops.triton.utils.gemm_config_utils",
        name=None,
        source=_vllm("rocm_aiter_ops.is_triton_blockscale_bpreshuffle_gemm_tuned", "4388-4395"),
        stands_in="the same reading of config files (the pinned release ships no GEMM-A8W8_BLOCKSCALE_PRESHUFFLED config)",
    ),
    UncheckedPath(
        path="gfx1250's preshuffled block-scale GEMM (gemm_a8w8_blockscale_preshuffle, after the (16, 16) shuffle)",
        module="aiter.ops.triton.gemm_a8w8_blockscale",
        name="gemm_a8w8_blockscale_preshuffle",
        source=_vllm("_rocm_aiter_triton_gemm_a8w8_blockscale_preshuffle_impl", "1021"),
        stands_in=(
            "the aiter-triton-bpreshuffle kernel, an emulation: aiter's plain Triton GEMM contract read through "
            "the (16, 16) shuffle; aiter's shuffle itself is checked (tests/aiter_reference)"
        ),
    ),
    UncheckedPath(
        path=(
            "the fused q/kv RMSNorm + FP8 group quant of MLADualRMSGroupQuantPattern (DeepSeek-V3) and of "
            "DeepSeek-V4's _split_qkv_and_norm (fused_mla_dual_rms_norm_group_quant)"
        ),
        module="aiter.ops.fused_qk_rmsnorm_group_quant",
        name=None,
        source=_vllm("_fused_mla_dual_rms_norm_group_quant_impl", "1832-1834"),
        stands_in=(
            "the norm+quant backends: the released Triton fused_rms_fp8_group_quant ('aiter-triton', aiter's "
            "code, a different kernel) and the 'aiter-fused' recipe; the HIP kernel vLLM calls is not run"
        ),
    ),
)
