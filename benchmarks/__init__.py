"""The standing benchmarks and their harness; the figures they produced are in RESULTS.md.

GPU benchmarks (all run by run_gpu_checks.sh): gemm_bench, normquant_bench, triage_gpu_bench, gpu_probe,
gpu_profile_samples. CPU benchmarks (run by hand on the machine a RESULTS.md entry names):
cpu_gemm_emulation, cpu_layer_bench, trace_bench. Run any of them from the repository root with
``PYTHONPATH=. python3 benchmarks/<name>.py --help``.
"""
