"""How vLLM 0.33.0 and SGLang 0.5.23 route a block-FP8 linear among aiter's backends, as Checks.

The kernels' ``selection`` options name these rules; each returns a `Check` whose reason cites the
release, file and function the rule was read from.

vLLM 0.33.0, ``model_executor/kernels/linear/scaled_mm/aiter.py`` ``AiterFp8BlockScaledMMKernel.__init__``
(one vLLM class, three backends, decided per layer at construction):

- ``use_bpreshuffle = on_gfx1250() and N % 16 == 0 and K % 128 == 0 and
  is_triton_blockscale_bpreshuffle_gemm_tuned(N, K)`` (aiter's Triton preshuffle GEMM; the config probe at
  M=1, ``_aiter_ops.py``) - `vllm_bpreshuffle_check`;
- else ``use_triton = not is_fp8_fnuz() and (is_triton_gemm_w8a8_tuned(N, K) or on_gfx1250())`` (aiter's
  Triton block-scale GEMM; the probe at M=128) - `vllm_triton_check`;
- else CK ``gemm_a8w8_blockscale``.

``is_fp8_fnuz`` is ``"gfx94" in arch`` (``platforms/rocm.py``), ``on_gfx1250`` the arch gfx1250.

SGLang 0.5.23, ``srt/layers/quantization/fp8_utils.py`` ``aiter_w8a8_block_fp8_linear`` and
``layers/quantization/fp8.py`` ``Fp8LinearMethod.process_weights_after_loading``, with
``SGLANG_USE_AITER=1`` on gfx95 and HIP >= 7.2 (``_use_aiter_bpreshuffle_gfx95``; that version fact is the
engine profile's to check, not a kernel's): a layer whose (N, K) is in the hard-coded list of
``use_aiter_triton_gemm_w8a8_tuned_gfx950`` runs aiter's Triton GEMM - `sglang_triton_check`; every other
block-FP8 linear is shuffled (16, 16) at load and runs CK ``gemm_a8w8_blockscale_bpreshuffle`` -
`sglang_bpreshuffle_check` (unless flagged ``keep_plain_weight_layout``, which the kernel honours at load).
"""

from __future__ import annotations

from ..implementations import Check
from .platforms import Platform
from .triton_configs import BLOCKSCALE, BLOCKSCALE_PRESHUFFLED, PROBE_M, TritonConfigTable

VLLM = "vLLM 0.33.0"
SGLANG = "SGLang 0.5.23"
_VLLM_AITER = f"{VLLM} scaled_mm/aiter.py AiterFp8BlockScaledMMKernel"
_SGLANG_FP8 = f"{SGLANG} fp8_utils.py"

# SGLang 0.5.23 srt/layers/quantization/fp8_utils.py use_aiter_triton_gemm_w8a8_tuned_gfx950: the (N, K)
# that run aiter's Triton GEMM on gfx95 (unless DeepSeek-V4 forces CK through set_force_ck_w8a8).
SGLANG_TRITON_SHAPES: frozenset[tuple[int, int]] = frozenset(
    {
        (1024, 8192),
        (16384, 1536),
        (2112, 7168),
        (3072, 1536),
        (32768, 8192),
        (4096, 7168),
        (4608, 7168),
        (512, 7168),
        (7168, 2048),
        (7168, 2304),
        (7168, 256),
        (8192, 1024),
        (8192, 32768),
    }
)
GFX1250 = "gfx1250"
SGLANG_GFX95 = "gfx950"


def is_fp8_fnuz(plat: Platform) -> bool:
    """vLLM 0.33 ``RocmPlatform.is_fp8_fnuz``: the e4m3fnuz architectures, gfx94x."""
    return plat.arch.startswith("gfx94")


def _probe(table: TritonConfigTable | None, plat: Platform, config: str, n: int, k: int) -> tuple[bool, str]:
    if table is None:
        return False, "no aiter Triton config table to consult"
    tuned = table.tuned(plat, config, n, k)
    verdict = "has a" if tuned else "has no"
    return tuned, (
        f"{table.source} {verdict} tuned {plat.arch}-{config}-N={n}-K={k}.json at the probe M={PROBE_M[config]}"
    )


def vllm_bpreshuffle_check(plat: Platform, n: int, k: int, table: TritonConfigTable | None) -> Check:
    """vLLM 0.33's ``use_bpreshuffle``: gfx1250, N % 16 == 0, K % 128 == 0, and a tuned preshuffle config."""
    if plat.arch != GFX1250:
        return Check(False, f"{_VLLM_AITER}: the Triton preshuffle backend runs on gfx1250 only, not {plat.arch}")
    if n % 16 or k % 128:
        return Check(False, f"{_VLLM_AITER}: the preshuffle backend needs N % 16 == 0 and K % 128 == 0 (N={n}, K={k})")
    tuned, why = _probe(table, plat, BLOCKSCALE_PRESHUFFLED, n, k)
    return Check(tuned, f"{_VLLM_AITER} use_bpreshuffle: {why}")


def vllm_triton_check(plat: Platform, n: int, k: int, table: TritonConfigTable | None) -> Check:
    """vLLM 0.33's ``use_triton``: not fnuz, and a tuned block-scale config or gfx1250."""
    if is_fp8_fnuz(plat):
        return Check(False, f"{_VLLM_AITER}: aiter's Triton backend is not used on fnuz ({plat.arch})")
    if plat.arch == GFX1250:
        return Check(
            True, f"{_VLLM_AITER} use_triton: on gfx1250 every layer not preshuffled takes aiter's Triton GEMM"
        )
    tuned, why = _probe(table, plat, BLOCKSCALE, n, k)
    return Check(tuned, f"{_VLLM_AITER} use_triton: {why}")


def sglang_triton_check(plat: Platform, n: int, k: int) -> Check:
    """SGLang 0.5.23's Triton shapes on gfx95."""
    if plat.arch != SGLANG_GFX95:
        return Check(False, f"{_SGLANG_FP8}: the hard-coded Triton shapes apply on gfx95, not {plat.arch}")
    listed = (n, k) in SGLANG_TRITON_SHAPES
    verb = "lists" if listed else "does not list"
    return Check(listed, f"{_SGLANG_FP8} use_aiter_triton_gemm_w8a8_tuned_gfx950 {verb} (N={n}, K={k})")


def sglang_bpreshuffle_check(plat: Platform, n: int, k: int) -> Check:
    """SGLang 0.5.23 on gfx95 with HIP >= 7.2: every block-FP8 linear not on the Triton list."""
    if plat.arch != SGLANG_GFX95:
        return Check(False, f"{_SGLANG_FP8}: the CK bpreshuffle path is gfx95's, not {plat.arch}'s")
    if (n, k) in SGLANG_TRITON_SHAPES:
        return Check(False, f"{_SGLANG_FP8}: (N={n}, K={k}) is on the Triton list, so it is neither shuffled nor CK")
    if n % 16:
        return Check(False, f"N={n} is not a multiple of 16 (shuffle_weight(16,16))")
    return Check(
        True,
        f"{_SGLANG_FP8} aiter_w8a8_block_fp8_linear: (N={n}, K={k}) is not on the Triton list, so it is shuffled "
        "at load and runs CK gemm_a8w8_blockscale_bpreshuffle",
    )
