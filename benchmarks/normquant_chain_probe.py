"""Where the fused norm + quant kernel spends its time when M is small (latency, not bandwidth).

  PYTHONPATH=. python3 benchmarks/normquant_chain_probe.py [--ms 1,16,64]

At decode sizes one program handles one row and its time is the length of one thread's dependent chain:
loads, the fp64 sum and its reduction, the correctly rounded sqrt and divisions, the group amax
reduction, the conversions and stores. This probe times, as CUDA-graph replays next to each other,
copies of the kernel source with one link of that chain replaced at a time:

  base          the library's kernel as it is
  smem-scale-store  the scales stored by tl.store, through shared memory, instead of in place (same bytes)
  const-div     the two divisions by constants (sum / N in fp64, amax / fp8 max in fp32) as a multiply
                by the rounded reciprocal plus one fma correction (Markstein): still correctly rounded
  fp32-sum      squares summed in fp32 instead of fp64 (not bitwise: timing only)
  rsqrt         the approximate rsqrt instead of div_rn(1, sqrt_rn) (timing only)
  fast-quant    approximate scale and reciprocal divisions (timing only)
  all-approx    fp32-sum + rsqrt + fast-quant (timing only)
  plain-max     tl.max for the group amax instead of the NaN-propagating reduce (timing only)

next to the unfused launches one by one, a kernel that only copies the row (same grid), and an empty
kernel: the floor a launch costs. Timing-only variants are not checked; the others are checked bitwise
against the library's kernel. The base kernel is also timed without `RowLaunch.short_chain` (weights
loaded after the sum's reduction, the fp64 sum one add after another) and at other warp counts (--warps),
which give the same bytes. Prints one markdown table per shape.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
from normquant_bench import markdown_table, time_graph  # benchmarks/ is on sys.path when run as a script

from mla_debug.gpu.normquant import support
from mla_debug.normquant import triton_fused, triton_unfused
from mla_debug.normquant._inputs import validate_inputs

SHAPES = {"V4-Flash": (1024, 512), "V4-Pro/R1-MLA": (1536, 512)}
SOURCE = Path(support.__file__).with_name("kernels.py")

CONST_DIV_FN = '''

@triton.jit
def _div_const(a, B: tl.constexpr):
    """a / B correctly rounded for a constant B: q0 = a * RN(1/B), then q0 + (a - q0 * B) * RN(1/B)."""
    y = tl.full(a.shape, 1.0 / B, a.dtype)
    q0 = a * y
    r = tl.fma(-q0, tl.full(a.shape, B, a.dtype), a)
    q = tl.fma(r, y, q0)
    return tl.where(q0 == float("inf"), q0, q)
'''

EDITS: dict[str, list[tuple[str, str]]] = {
    "base": [],
    "smem-scale-store": [("scale, scale_mask, SCALES_IN_PLACE)", "scale, scale_mask, False)")],
    "const-div": [
        ("mean = (total / N).to(tl.float32)", "mean = _div_const(total, N).to(tl.float32)"),
        ("scale = tl.div_rn(amax, tl.full(amax.shape, FMT_MAX, tl.float32))", "scale = _div_const(amax, FMT_MAX)"),
    ],
    "fp32-sum": [("s64 = s.to(tl.float64)", "s64 = s")],
    "rsqrt": [
        (
            "return tl.div_rn(tl.full(mean.shape, 1.0, tl.float32), tl.sqrt_rn(mean + eps))",
            "return tl.math.rsqrt(mean + eps)",
        )
    ],
    "fast-quant": [
        ("scale = tl.div_rn(amax, tl.full(amax.shape, FMT_MAX, tl.float32))", "scale = amax * (1.0 / FMT_MAX)"),
        ("inv = tl.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)", "inv = 1.0 / scale"),
    ],
    "plain-max": [("amax = tl.reduce(tl.abs(y), 2, _max_propagating_nan)", "amax = tl.max(tl.abs(y), 2)")],
}
EDITS["all-approx"] = EDITS["fp32-sum"] + EDITS["rsqrt"] + EDITS["fast-quant"]
# Variants that must give the library's bytes (checked before they are timed); the rest are timing only.
EXACT = ("base", "smem-scale-store", "const-div")


def variant_module(name: str, edits: list[tuple[str, str]], tmp: Path):
    text = SOURCE.read_text()
    for old, new in edits:
        if old not in text:
            raise SystemExit(f"probe {name}: the kernel source no longer contains {old!r}; update the probe")
        text = text.replace(old, new)
    if name == "const-div":
        text += CONST_DIV_FN
    path = tmp / f"nq_probe_{name.replace('-', '_')}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@triton.jit
def copy_rows_kernel(x_ptr, out_ptr, stride_x, N: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < N)
    tl.store(out_ptr + row * N + cols, x, mask=cols < N)


@triton.jit
def empty_kernel(x_ptr):
    pass


def fused_launch(module, nq, out, cfg):
    """The library's launcher, pointed at a variant's kernel module."""
    original = support.kernels
    support.kernels = lambda: module
    try:
        return triton_fused.make_launch(nq, out, cfg)
    finally:
        support.kernels = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", default="1,16,64")
    parser.add_argument(
        "--warps", default="4", help="warps per program tried for base (with short_chain), e.g. 2,4,8,16"
    )
    args = parser.parse_args()
    ms = [int(v) for v in args.ms.split(",")]
    warps = [int(v) for v in args.warps.split(",")]
    calls, replays = 100, 20
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        modules = {name: variant_module(name, edits, Path(tmp)) for name, edits in EDITS.items()}
        for shape, (n1, n2) in SHAPES.items():
            header = ["variant"] + [f"M={m} us" for m in ms]
            cells: dict[str, dict[int, str]] = {}  # label -> M -> time (a config may not run at every M)
            for m in ms:
                gen = torch.Generator(device="cuda").manual_seed(m)
                full = torch.randn(m, n1 + n2 + 64, generator=gen, device="cuda").to(torch.bfloat16)
                q, k, _ = full.split([n1, n2, 64], dim=1)
                w = (1.0 + 0.2 * torch.randn(n1 + n2, generator=gen, device="cuda")).to(torch.bfloat16)
                nq = validate_inputs(
                    "probe", q, w[:n1], 1e-6, k, w[n1:], None, None, 128, False, "e4m3fn", "aiter", False
                )
                heuristic = support.launch_for(m, (n1, n2), q.device)

                def record(label: str, launch) -> None:
                    us = time_graph(launch, calls, replays)
                    cells.setdefault(label, {})[m] = "n/a" if us is None else f"{us:.2f}"

                base_out = triton_fused.allocate_outputs(nq, False)
                triton_fused.make_launch(nq, base_out)()
                for name, module in modules.items():
                    exact = name in EXACT
                    configs = [heuristic]
                    if name == "base":
                        others = [support.RowLaunch(1, nw, short_chain=True) for nw in warps]
                        others.append(support.RowLaunch(1, heuristic.num_warps, short_chain=False))
                        configs += [cfg for cfg in others if cfg != heuristic]
                    for cfg in configs:
                        out = triton_fused.allocate_outputs(nq, False)
                        launch = fused_launch(module, nq, out, cfg)
                        launch()
                        if exact or cfg.short_chain != heuristic.short_chain:
                            for field in ("q_bytes", "scale", "k_out"):
                                if not torch.equal(getattr(out, field), getattr(base_out, field)):
                                    raise SystemExit(f"{name} {cfg}: {field} differs from the library's kernel")
                        record(f"fused {name} {cfg}", launch)
                three, norm_out, _ = triton_unfused.make_v4_launch(nq)
                record("triton-3 (three launches)", three)
                record("  its norm launch", triton_unfused.make_norm_launch(nq, norm_out))
                quant_out = triton_unfused.allocate_quant(nq)
                record("  one quant launch", triton_unfused.make_quant_launch(nq, norm_out.q_normed, quant_out))
                copy_out = torch.empty(m, n1, dtype=q.dtype, device="cuda")
                record(
                    "copy q rows (1 launch)",
                    lambda: copy_rows_kernel[(m,)](q, copy_out, q.stride(0), N=n1, BLOCK=2048, num_warps=4),
                )
                record("empty kernel", lambda: empty_kernel[(m,)](q, num_warps=4))
            print(f"\n### {shape} (n1={n1}, n2={n2}), CUDA-graph replays, {calls} calls per graph\n")
            rows = [[label] + [by_m.get(m, "-") for m in ms] for label, by_m in cells.items()]
            print(markdown_table(header, rows), flush=True)


if __name__ == "__main__":
    main()
