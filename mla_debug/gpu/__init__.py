"""The GPU wing: everything that imports triton - the Triton/Gluon GEMMs and the norm + quant kernels.

- `triton_env`: where Triton can run in this process (importable, on which GPU, compiled or interpreted).
- `gemm`: the block-scaled FP8 GEMM - its launcher (checks, byte orders, launch heuristics, dispatch to
  one of four kernels that give the same bytes) and the Triton and Gluon kernel sources.
- `normquant`: RMSNorm + FP8 group quant - the kernel source (fused and unfused), its loading, recipes
  and launch heuristics, and the launches.

The library's own modules use it through `kernels.triton_kernels` (the ``triton-*`` kernels) and
`normquant.triton_fused` / `normquant.triton_unfused` (the ``"triton"`` backend). Nothing here imports
triton when the package is imported: the kernel sources are imported on first launch, so the library
imports, and its CPU paths run, without triton. Measured figures behind the kernels' design are in
benchmarks/RESULTS.md.
"""
