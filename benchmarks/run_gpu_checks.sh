#!/usr/bin/env bash
# GPU correctness checks and every GPU benchmark in one go, for a CUDA machine (run from anywhere).
# Logs go to $OUT (or benchmarks/out): versions.txt, gpu_probe.log, gpu_tests.log, aiter_tests.log,
# engine_paths.log, one .md/.log per benchmark and profile_samples/ (the sample traces, recorded afresh).
# BENCH=0 skips the benchmarks; BENCH_ARGS=--quick shortens the GEMM and norm+quant sweeps.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/out}
mkdir -p "$out"
# The checkout first; a PYTHONPATH already set (wheels unpacked beside, e.g. amd-aiter) stays after it.
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 - <<'PY' | tee "$out/versions.txt"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name())
try:
    import triton
    print("triton", triton.__version__)
except ImportError:
    print("triton not installed")
PY
python3 benchmarks/gpu_probe.py 2>&1 | tee "$out/gpu_probe.log"
# Only GPU-marked tests, from files that import nothing the GPU image lacks (no hypothesis there).
python3 -m pytest -q -rA -m gpu tests/kernels tests/parallel tests/profiling tests/normquant/test_nq_triton_gpu.py \
  --ignore=tests/profiling/test_attribution_properties.py --ignore=tests/kernels/test_triton_gemm_configs.py \
  -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
status=${PIPESTATUS[0]}
# aiter's own Triton kernels compiled here against ours and our emulations (needs the aiter extra,
# amd-aiter; without it these tests skip, saying so). Plain pytest files: no hypothesis on the GPU image.
python3 -m pytest -q -rA tests/aiter_reference/test_aiter_gpu.py tests/aiter_reference/test_gemm_vs_aiter.py \
  tests/aiter_reference/test_quant_vs_aiter.py tests/aiter_reference/test_normquant_vs_aiter.py \
  tests/aiter_reference/test_loader.py tests/kernels/test_aiter_triton_kernel.py \
  -p no:cacheprovider 2>&1 | tee "$out/aiter_tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
# Triages whose diverging step is consumed by aiter's own compiled GEMM (SGLang's as_strided scale view handed
# to it, DeepSeek-V3 on the mi355x profile), and vLLM 0.33 on h200: FlashInfer's small-M path and W_UK/W_UV
# through kv_b_proj's kernel, on CUDA tensors.
python3 -m pytest -q -rA tests/aiter_reference/test_triage_through_aiter.py tests/triage/test_engine_paths.py \
  -p no:cacheprovider 2>&1 | tee "$out/engine_paths.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
# A captured FP8 engine (transformers' DeepSeek-V3 attention on aiter's Triton quant and GEMM) explained
# against the emulation: within FP8 noise clean, the planted column-major scale view named.
python3 -m pytest -q -rA tests/gpu/test_capture_explain_gpu.py -p no:cacheprovider 2>&1 | tee "$out/capture_explain_gpu.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
if [ "${BENCH:-1}" != 0 ]; then
  python3 benchmarks/gemm_bench.py ${BENCH_ARGS:-} --out "$out/gemm_bench.md" 2>&1 | tee "$out/gemm_bench.log"
  python3 benchmarks/normquant_bench.py ${BENCH_ARGS:-} --out "$out/normquant_bench.md" 2>&1 | tee "$out/normquant_bench.log"
  python3 benchmarks/triage_gpu_bench.py --out "$out/triage_gpu.md" 2>&1 | tee "$out/triage_gpu.log"
  python3 benchmarks/aiter_bench.py ${BENCH_ARGS:-} --diagnose --out "$out/aiter_bench.md" 2>&1 | tee "$out/aiter_bench.log"
  python3 benchmarks/gpu_profile_samples.py --out "$out/profile_samples" 2>&1 | tee "$out/gpu_profile_samples.log"
fi
exit "$status"
