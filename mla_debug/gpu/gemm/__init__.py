"""The block-scaled FP8 GEMM on NVIDIA GPUs (and the CPU under Triton's interpreter).

- `launcher`: `triton_block_scaled_mm` - operand checks, the activation-scale byte order, launch
  configurations (a shape heuristic, or `autotune`) and the choice of kernel; imports triton on first use.
- `triton_kernel`: the Triton kernel, every GPU and the interpreter.
- `gluon_kernel`, `gluon_persistent`, `gluon_specialized`: Hopper (sm_90) kernels in Triton's Gluon
  dialect, which take over where they run faster; the same arithmetic, so the same bytes.

The ``triton-blockscale`` and ``triton-bpreshuffle`` kernels (`kernels.triton_kernels`) run on it.
"""

from .launcher import LaunchConfig, autotune, launch_config, runs_on, triton_block_scaled_mm, triton_status

__all__ = ["LaunchConfig", "autotune", "launch_config", "runs_on", "triton_block_scaled_mm", "triton_status"]
