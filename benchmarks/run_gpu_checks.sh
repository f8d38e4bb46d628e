#!/usr/bin/env bash
# GPU correctness checks and GPU timings in one go, for a CUDA machine (run from anywhere).
# Logs go to $OUT (or benchmarks/out): versions.txt, gpu_probe.log, gpu_tests.log, gpu_gemm_bench.log/.md.
# BENCH=0 skips the timing sweep; BENCH_ARGS=--quick shortens it.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/out}
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
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
# Only GPU-marked tests; these folders import nothing the GPU image lacks (no hypothesis there).
python3 -m pytest -q -rA -m gpu tests/kernels tests/parallel tests/profiling --ignore=tests/profiling/test_attribution_properties.py -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
status=${PIPESTATUS[0]}
if [ "${BENCH:-1}" != 0 ]; then
  python3 benchmarks/gpu_gemm_bench.py ${BENCH_ARGS:-} --out "$out/gpu_gemm_bench.md" 2>&1 | tee "$out/gpu_gemm_bench.log"
fi
exit "$status"
