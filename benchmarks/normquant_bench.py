"""H200 timings of the fused RMSNorm + FP8 group quant against the pre-fusion paths it replaces.

Variants, per DeepSeek-V4 shape (V4-Flash qr/kv = 1024/512; V4-Pro and R1 MLA = 1536/512) and M tokens:
  fused         one Triton launch: q and k normed, q quantized from fp32 (backend "triton")
  triton-3      the Triton pre-fusion path: norm to bf16, quant for wq_b, the same quant again for
                indexer.wq_b (3 launches; mla_debug.normquant.triton_unfused)
  torch-eager   the same three steps in plain torch ops (plain_unfused_v4 below)
  torch-compile plain_unfused_v4 through torch.compile (compiled once per shape, M dynamic; warm)

Before timing, every variant is checked on one shape against the library's torch backend: the Triton
ones bit for bit, the plain-torch ones within what their approximate rsqrt and fp32 sums allow (1 bf16
ulp on k and the stored q, 1 fp8 ulp on the bytes); a failure stops the run.

Times (`harness`): (1) median of CUDA-event-timed single calls, L2 flushed before each (`EventTimer`);
(2) CUDA-graph replay: N calls captured in one graph, replay time / N (no launch overhead; `time_graph`),
the calls rotating over enough buffer sets (up to 8) that a large-M call never finds the previous one's
data in L2.
The fused kernel's achieved bandwidth counts the bytes it must move - q and k read, q fp8 + scales +
k written (+ residual read and sum written, if used) - and is compared with a device-to-device copy
measured in the same run (bytes read + written / time).

Run from the repo root:  PYTHONPATH=. python3 benchmarks/normquant_bench.py [--quick] [--ms 1,64] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks.harness import (
    EventTimer,
    copy_bandwidth,
    environment,
    int_list,
    markdown_table,
    require_cuda,
    time_graph,
    write_report,
)

SHAPES = {"V4-Flash": (1024, 512), "V4-Pro/R1-MLA": (1536, 512)}
MS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
QUICK_MS = (1, 64, 1024, 16384)
VARIANTS = ("fused", "triton-3", "torch-eager", "torch-compile")
GROUP = 128
EPS = 1e-6
FP8_MAX = 448.0  # e4m3fn with the aiter flavor (what the NVIDIA path uses)


# --- CPU-safe helpers ------------------------------------------------------------------------------


def fused_bytes(m: int, n1: int, n2: int, residual: bool = False, in_bytes: int = 2) -> int:
    """Bytes the fused op must move: q, k read; q fp8, q scales (fp32 per 128), k written; with a
    residual also the residual read and the sum written. Weights (a few KiB) are left out."""
    moved = m * n1 * in_bytes + m * n2 * in_bytes  # reads
    moved += m * n1 + m * (n1 // GROUP) * 4 + m * n2 * in_bytes  # writes
    if residual:
        moved += 2 * m * n1 * in_bytes
    return moved


def speedup(base_us: float | None, fused_us: float | None) -> str:
    if not base_us or not fused_us:
        return "n/a"
    return f"{base_us / fused_us:.2f}x"


def fmt_us(us: float | None) -> str:
    return "n/a" if us is None else f"{us:.1f}"


def plain_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as plain torch ops (fp32 math, result in x's dtype)."""
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * r * w.float()).to(x.dtype)


def plain_group_quant(x: torch.Tensor, transpose_scale: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-1x128 e4m3fn quant as plain torch ops (aiter flavor: amax floor 1e-10, x * (1/scale), clamp).
    The scale buffer is (M, G) with ROW_MAJOR bytes, or COL_MAJOR ("view") bytes when `transpose_scale`."""
    m, n = x.shape
    xg = x.float().view(m, n // GROUP, GROUP)
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10)
    scale = amax / FP8_MAX
    q = (xg * (1.0 / scale)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(m, n)
    scale = scale.view(m, n // GROUP)
    if transpose_scale:
        scale = scale.t().contiguous().view(m, n // GROUP)
    return q, scale


def plain_unfused_v4(q, q_w, k, k_w, transpose_scale: bool = False):
    """DeepSeek-V4's pre-fusion path in plain torch: norm qr and kv, quantize the bf16 qr twice."""
    qn = plain_rmsnorm(q, q_w, EPS)
    kn = plain_rmsnorm(k, k_w, EPS)
    first = plain_group_quant(qn, transpose_scale)
    second = plain_group_quant(qn, transpose_scale)
    return first, second, kn, qn


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in ulps between two bf16/fp16 tensors (NaN positions must match)."""
    assert torch.equal(torch.isnan(a), torch.isnan(b)), "NaN positions differ"
    ia, ib = a.view(torch.int16).to(torch.int32), b.view(torch.int16).to(torch.int32)
    ia = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ib = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    d = (ia - ib).abs()[~torch.isnan(a)]
    return int(d.max()) if d.numel() else 0


def check_plain(label: str, got, ref_v4) -> None:
    """A plain-torch result against the library's torch unfused path: within 1 bf16 ulp on k and the
    stored q (rsqrt and fp32 sums are not correctly rounded), 1 fp8 ulp on the bytes, and scales within
    the relative step of one bf16 ulp of amax."""
    from mla_debug.numerics import fp8_ulp_distance

    (q1, s1), (q2, s2), kn, qn = got
    for name, a, b in (("k", kn, ref_v4.k_normed), ("q bf16", qn, ref_v4.q_bf16)):
        d = ulp_distance(a, b)
        if d > 1:
            raise AssertionError(f"{label}: {name} differs by {d} bf16 ulps from the torch backend")
    for q, s, ref in ((q1, s1, ref_v4.q_for_wq_b), (q2, s2, ref_v4.q_for_indexer)):
        dist = fp8_ulp_distance(q, ref.data)
        if torch.isnan(dist).any() or dist.max().item() > 1:
            raise AssertionError(f"{label}: fp8 bytes differ by {dist.nan_to_num(99).max().item():g} ulps")
        rel = ((s.double() - ref.scale.double()).abs() / ref.scale.double()).max().item()
        if rel > 2.0**-7:
            raise AssertionError(f"{label}: scales differ by up to {rel:.3g} relative")
        if (s.stride(), tuple(s.shape)) != (ref.scale.stride(), tuple(ref.scale.shape)):
            raise AssertionError(f"{label}: scale buffer {tuple(s.shape)}/{s.stride()} vs the library's")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer M values and iterations")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown tables here")
    parser.add_argument("--iters", type=int, default=None, help="timed calls per measurement (default 200, quick 30)")
    parser.add_argument("--graph-calls", type=int, default=None, help="calls captured per CUDA graph (default 100)")
    parser.add_argument("--col-major", action="store_true", help="transpose_scale=True (COL_MAJOR scale bytes)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    parser.add_argument("--shapes", nargs="*", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--ms", type=int_list, default=None, help="M1,M2,... instead of the default M values")
    return parser.parse_args(argv)


# --- GPU part ----------------------------------------------------------------------------------------


@dataclass
class Case:
    """Inputs of one (shape, M): qr and kv as torch.split views of one fused_wqa_wkv-like output."""

    q: torch.Tensor
    k: torch.Tensor
    q_w: torch.Tensor
    k_w: torch.Tensor
    transpose_scale: bool
    args: object = field(default=None)


def make_case(n1: int, n2: int, m: int, transpose_scale: bool, seed: int = 0) -> Case:
    from mla_debug.normquant import validate_inputs

    gen = torch.Generator(device="cuda").manual_seed(seed)
    full = torch.randn(m, n1 + n2 + 64, generator=gen, device="cuda").to(torch.bfloat16)
    q, k, _ = full.split([n1, n2, 64], dim=1)
    w = (1.0 + 0.2 * torch.randn(n1 + n2, generator=gen, device="cuda")).to(torch.bfloat16)
    q_w, k_w = w.split([n1, n2])
    case = Case(q, k, q_w, k_w, transpose_scale)
    case.args = validate_inputs(
        "bench", q, q_w, EPS, k, k_w, None, None, GROUP, transpose_scale, "e4m3fn", "aiter", False
    )
    return case


def variants(case: Case, compiled: Callable | None) -> dict[str, Callable[[], object]]:
    """Zero-argument callables, outputs preallocated where the path allows (the Triton ones)."""
    from mla_debug.gpu.normquant import launch

    fused_out = launch.allocate_outputs(case.args, return_unquantized=False)
    fused = launch.make_launch(case.args, fused_out)
    three, _, _ = launch.make_v4_launch(case.args)
    calls: dict[str, Callable[[], object]] = {
        "fused": fused,
        "triton-3": three,
        "torch-eager": lambda: plain_unfused_v4(case.q, case.q_w, case.k, case.k_w, case.transpose_scale),
    }
    if compiled is not None:
        calls["torch-compile"] = lambda: compiled(case.q, case.q_w, case.k, case.k_w, case.transpose_scale)
    return calls


def check_correctness(n1: int, n2: int, m: int, transpose_scale: bool, compiled: Callable | None) -> None:
    """Every variant against the library's torch backend on one shape; raises on any mismatch."""
    from mla_debug.gpu.normquant import launch
    from mla_debug.normquant import fused_qk_rmsnorm_group_quant, norm_then_quant_for_v4, triton_norm_then_quant_for_v4

    case = make_case(n1, n2, m, transpose_scale, seed=123)
    kw = dict(transpose_scale=transpose_scale)
    ref = fused_qk_rmsnorm_group_quant(case.q, case.q_w, EPS, case.k, case.k_w, backend="torch", **kw)
    outs = launch.allocate_outputs(case.args, False)
    outs.q_bytes.fill_(0xFF)
    outs.scale.fill_(float("nan"))
    launch.make_launch(case.args, outs)()
    torch.cuda.synchronize()
    bad = int((outs.q_bytes != ref.q_quant.data.view(torch.uint8)).sum())
    bad_scales = int((outs.scale.view(torch.int32) != ref.q_quant.scale.view(torch.int32)).sum())
    if bad or bad_scales or not torch.equal(outs.k_out.view(torch.int16), ref.k_normed.view(torch.int16)):
        raise AssertionError(f"fused: {bad} fp8 bytes and {bad_scales} scales differ from the torch backend")
    ref_v4 = norm_then_quant_for_v4(case.q, case.q_w, EPS, case.k, case.k_w, **kw)
    ours = triton_norm_then_quant_for_v4(case.q, case.q_w, EPS, case.k, case.k_w, **kw)
    for a, b in ((ours.q_for_wq_b, ref_v4.q_for_wq_b), (ours.q_for_indexer, ref_v4.q_for_indexer)):
        if not (torch.equal(a.data.view(torch.uint8), b.data.view(torch.uint8)) and torch.equal(a.scale, b.scale)):
            raise AssertionError("triton-3: differs from the torch unfused path")
    check_plain("torch-eager", plain_unfused_v4(case.q, case.q_w, case.k, case.k_w, transpose_scale), ref_v4)
    if compiled is not None:
        check_plain("torch-compile", compiled(case.q, case.q_w, case.k, case.k_w, transpose_scale), ref_v4)
    print(f"correctness on {n1}/{n2} M={m}: fused and triton-3 bitwise, plain torch within 1 ulp - OK", flush=True)


def compile_plain() -> Callable | None:
    try:
        return torch.compile(plain_unfused_v4, dynamic=None)
    except Exception as err:
        print(f"torch.compile unavailable: {err}", file=sys.stderr)
        return None


def warm_compiled(compiled: Callable, case: Case) -> None:
    # M varies within a shape: mark it dynamic so each shape compiles once (M = 1 is specialized by
    # torch and compiles once more)
    torch._dynamo.maybe_mark_dynamic(case.q, 0)
    torch._dynamo.maybe_mark_dynamic(case.k, 0)
    compiled(case.q, case.q_w, case.k, case.k_w, case.transpose_scale)
    torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    require_cuda("normquant_bench")
    iters = opts.iters or (30 if opts.quick else 200)
    graph_calls = opts.graph_calls or (20 if opts.quick else 100)
    replays = 5 if opts.quick else 20
    ms = tuple(opts.ms) if opts.ms else (QUICK_MS if opts.quick else MS)
    compiled = None if opts.no_compile else compile_plain()
    header_line = f"{environment('cuda')}, scale {'COL_MAJOR' if opts.col_major else 'ROW_MAJOR'}"
    print(header_line, flush=True)
    if compiled is not None:
        try:
            warm_compiled(compiled, make_case(1536, 512, 1000, opts.col_major, seed=1))
        except Exception as err:  # an inductor/toolchain problem is not a wrong result: drop the variant
            print(f"torch.compile failed, skipping that variant: {type(err).__name__}: {err}", file=sys.stderr)
            compiled = None

    # the second check runs the launch heuristic's multi-row programs (V4-Flash, large M)
    check_correctness(1536, 512, 1000, opts.col_major, compiled)
    check_correctness(1024, 512, 16384, opts.col_major, compiled)
    ceiling = copy_bandwidth()
    print(f"device copy bandwidth: {ceiling:.0f} GB/s (read + write)", flush=True)
    timer = EventTimer(iters, warmup=5)
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size

    event_rows, graph_rows = [], []
    for shape_name in opts.shapes:
        n1, n2 = SHAPES[shape_name]
        for m in ms:
            moved = fused_bytes(m, n1, n2)
            # Graph calls rotate over buffer sets of at least 4x the L2 in all (at most 8 sets): at large
            # M no call finds the previous one's data in L2; at small M everything fits anyway (decode).
            sets = max(1, min(8, -(-4 * l2_bytes // moved)))
            cases = [make_case(n1, n2, m, opts.col_major, seed=m + i) for i in range(sets)]
            if compiled is not None:
                warm_compiled(compiled, cases[0])
            per_set = [variants(c, compiled) for c in cases]
            calls = per_set[0]
            ev = {name: timer(fn) for name, fn in calls.items()}
            gr = {name: time_graph([s[name] for s in per_set], graph_calls, replays) for name in calls}
            for rows, t in ((event_rows, ev), (graph_rows, gr)):
                gbs = moved / (t["fused"] * 1e-6) / 1e9 if t.get("fused") else None
                rows.append(
                    [shape_name, str(m)]
                    + [fmt_us(t.get(v)) for v in VARIANTS]
                    + [speedup(t.get(v), t.get("fused")) for v in VARIANTS[1:]]
                    + ["n/a" if gbs is None else f"{gbs:.0f}", "n/a" if gbs is None else f"{100 * gbs / ceiling:.0f}%"]
                )
            print(f"{shape_name} M={m}: " + ", ".join(f"{k} {fmt_us(v)} us" for k, v in ev.items()), flush=True)
            del cases, calls, per_set

    header = ["shape", "M"] + [f"{v} us" for v in VARIANTS] + [f"fused vs {v}" for v in VARIANTS[1:]]
    header += ["fused GB/s", "of copy BW"]
    text = "\n\n".join(
        [
            f"# Fused RMSNorm + FP8 group quant ({header_line})",
            f"Device-to-device copy: {ceiling:.0f} GB/s (read + write). Bytes counted for the fused op: q and k "
            "read, q fp8 + fp32 scales + k written.",
            f"## Single calls, CUDA events, L2 flushed before each (median of {iters})",
            markdown_table(header, event_rows),
            f"## CUDA graph replay ({graph_calls} calls per graph, median of {replays} replays; calls rotate over "
            "buffer sets of >= 4x the L2 where at most 8 sets reach it, so large M never reuses L2)",
            markdown_table(header, graph_rows),
        ]
    )
    print("\n" + text)
    write_report(opts.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
