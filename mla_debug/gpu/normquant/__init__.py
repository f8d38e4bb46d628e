"""RMSNorm + FP8 group quant on NVIDIA GPUs (and the CPU under Triton's interpreter).

- `kernels`: the Triton source - the fused kernel and the two of the unfused baseline, sharing the
  device functions that fix the numerics (never imported directly: `support.kernels` loads it).
- `support`: where the kernels can run, loading them (compiled or interpreted), a flavor's recipe as
  compile-time constants, the scale byte order, overflow reports, the launch heuristic.
- `launch`: the launches - output buffers, constants and grid - as zero-argument callables.

The ``"triton"`` backend (`normquant.triton_fused`) and the Triton unfused path
(`normquant.triton_unfused`) run on it.
"""
