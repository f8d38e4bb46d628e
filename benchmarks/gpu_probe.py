"""Facts about the GPU that the kernels depend on, printed (asserts nothing; run_gpu_checks.sh logs them).

  PYTHONPATH=. python3 benchmarks/gpu_probe.py

1. Which M does cuBLAS blockwise scaled_mm accept with a correct COL_MAJOR_STRIDED activation scale?
   (`cublas-blockwise` pads M to a multiple of 4 because of the answer, RESULTS.md.)
2. Where do group quantization results differ between the CPU and the GPU, stage by stage?
"""

from __future__ import annotations

import argparse

import torch

import mla_debug as md
from benchmarks.harness import environment, require_cuda


def cublas_m_sweep() -> None:
    """Raw scaled_mm calls (not the adapter, which pads M) for a range of M."""
    from torch.nn.functional import ScalingType, scaled_mm

    n, k = 256, 512
    w = md.layouts.quantize_blocks(torch.randn(n, k, device="cuda") * 0.02)
    for m in [1, 2, 3, 4, 5, 7, 8, 12, 15, 16, 17, 31, 32, 33, 64, 100]:
        qa = md.quantize_groups(torch.randn(m, k, device="cuda"), scale_layout=md.ScaleLayout.COL_MAJOR_STRIDED)
        try:
            scaled_mm(
                qa.data,
                w.data.t(),
                qa.scale,
                ScalingType.BlockWise1x128,
                w.scale.t(),
                ScalingType.BlockWise128x128,
                output_dtype=torch.bfloat16,
            )
            outcome = "ok"
        except Exception as err:  # report, keep going
            outcome = f"{type(err).__name__}: {str(err)[:160]}"
        print(f"cublas M={m:<4} scale strides {tuple(qa.scale.stride())}: {outcome}")


def quant_stage_diff() -> None:
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(64, 1024, generator=gen) * torch.logspace(0, 3, 64)[:, None]).to(torch.bfloat16)
    for fmt in (md.E4M3FN, md.E4M3FNUZ):
        stages = {}
        for dev in ("cpu", "cuda"):
            xf = x.to(dev).float().view(64, 8, 128)
            amax = xf.abs().amax(-1, keepdim=True).clamp_min(1e-10)
            scale = amax / fmt.max
            inv = 1.0 / scale
            y = (xf * inv).clamp(-fmt.max, fmt.max)
            q = y.to(fmt.dtype)
            stages[dev] = dict(amax=amax, scale=scale, inv=inv, y=y, q=q.view(torch.uint8))
        for name in ("amax", "scale", "inv", "y", "q"):
            a, b = stages["cpu"][name], stages["cuda"][name].cpu()
            diff = (a != b) if name == "q" else (a.view(torch.int32) != b.view(torch.int32))
            print(f"{fmt.name} stage {name}: {int(diff.sum())} of {diff.numel()} differ")
            if name in ("inv", "y", "q") and diff.any():
                idx = diff.nonzero()[:5]
                for i in idx:
                    t = tuple(i.tolist())
                    yc, yg = stages["cpu"]["y"][t].item(), stages["cuda"]["y"].cpu()[t].item()
                    print(f"   at {t}: cpu {a[t].item()!r} gpu {b[t].item()!r} (y cpu {yc!r} gpu {yg!r})")
        # the cast alone, same fp32 input on both devices
        y = stages["cpu"]["y"]
        cast_cpu = y.to(fmt.dtype).view(torch.uint8)
        cast_gpu = y.cuda().to(fmt.dtype).cpu().view(torch.uint8)
        bad = cast_cpu != cast_gpu
        print(f"{fmt.name} cast of identical fp32 values: {int(bad.sum())} differ")
        for i in bad.nonzero()[:8]:
            t = tuple(i.tolist())
            print(f"   y={y[t].item()!r}: cpu byte {cast_cpu[t].item():#04x} gpu byte {cast_gpu[t].item():#04x}")


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    require_cuda("gpu_probe")
    print(environment("cuda"))
    cublas_m_sweep()
    quant_stage_diff()


if __name__ == "__main__":
    main()
