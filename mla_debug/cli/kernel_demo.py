"""`mla-debug kernel-demo`: the three silent layout bugs of aiter's preshuffled FP8 GEMM, one GEMM at a
time, reproduced on the CPU (the kernel-level view; `make demo` runs the layer-level triage).

DeepSeek-V3 at TP8 on an MI355X, with vLLM's kernel choice after PR #51692 (preshuffled kernel first
for every shape in aiter's tuned table):

1. scale order - a producer hands ROW_MAJOR activation scales to a kernel that reads COL_MAJOR bytes:
   right at M=1, wrong for every M > 1;
2. double shuffle - the model shuffles a weight and the kernel shuffles it again at load;
3. direct read of a relaid weight - MLA's absorbed decode reads kv_b_proj's raw bytes after the kernel
   shuffled them.

Every number is computed by running the emulated kernels; nothing is looked up.
"""

from __future__ import annotations

import argparse
import time

import torch

from ..kernels import BlockScaledLinear, KernelPolicy, TunedTable, get_kernel, platform
from ..layouts import ScaleLayout, identify_weight_layout, quantize_blocks, quantize_groups, weight_read_violation
from ..numerics import error_metrics
from ..viz.violations import violation_sentence

# Per-rank shapes of DeepSeek-V3 at TP8 (weight is (N, K) = (out, in)).
Q_B_PROJ_TP8 = (3072, 1536)  # 24576 / 8 rows of 16 heads x (128 + 64)
O_PROJ_TP8 = (7168, 2048)  # 16384 / 8 input columns
KV_B_PROJ_TP8 = (4096, 512)  # 32768 / 8 rows of 16 heads x (128 + 128)
OK_BELOW = 1e-3  # rel. error vs the reference on the same fp8 input: fp32 summation order stays ~1e-6


def _synthetic_weight(n: int, k: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * 0.02
    w *= torch.rand(-(-n // 128), generator=gen).repeat_interleave(128)[:n, None] * 4 + 0.25
    return quantize_blocks(w, fmt=platform("mi355x").fp8)


def _tokens(m: int, k: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    magnitudes = torch.logspace(0, 2, m)[torch.randperm(m, generator=gen)]
    return (torch.randn(m, k, generator=gen) * magnitudes[:, None]).to(torch.bfloat16)


def _verdict(rel: float) -> str:
    return "ok" if rel < OK_BELOW else "WRONG"


def scale_order_story(policy: KernelPolicy) -> None:
    n, k = Q_B_PROJ_TP8
    weight = _synthetic_weight(n, k, seed=1)
    chosen = BlockScaledLinear("q_b_proj", weight).load(policy, "mi355x")
    plain = BlockScaledLinear("q_b_proj", weight).attach(get_kernel("aiter-blockscale"))
    reference = BlockScaledLinear("q_b_proj", weight).attach(get_kernel("torch-reference"))
    print(f"1. Scale order - q_b_proj (N={n}, K={k}) at TP8")
    print(f"   kernel chosen at load: {chosen.kernel_reason}")
    print("   a pre-quantizing producer (fused RMSNorm + group quant, transpose_scale=False) writes ROW_MAJOR")
    print(f"   {'M':>3}  {'kernel':<18} {'scale given':<18} {'rel err':>9}  verdict")
    violations = []
    for m in (1, 16):
        x = _tokens(m, k, seed=10 + m)
        for lin, layout in (
            (plain, ScaleLayout.ROW_MAJOR),
            (chosen, ScaleLayout.ROW_MAJOR),
            (chosen, ScaleLayout.COL_MAJOR),
        ):
            qa = quantize_groups(x, fmt=weight.fmt, scale_layout=layout, producer="fused norm+quant")
            call = lin.run(qa)
            rel = error_metrics(call.output, reference(qa))["rel_l2"]
            latent = any(not v.effective for v in call.violations)
            note = " (contract broken, but at M=1 both orders are the same bytes)" if latent else ""
            print(f"   {m:>3}  {call.kernel:<18} {layout.name:<18} {rel:9.2e}  {_verdict(rel)}{note}")
            violations += [v for v in call.violations if v.effective]
    x = _tokens(16, k, seed=99)
    fp32 = x.float() @ weight.dequantize_plain().t()
    floor = error_metrics(reference(x), fp32)["rel_l2"]
    print(f"   (FP8 quantization noise of the activation vs an fp32 matmul, for scale: {floor:.2e})")
    print(f"   contract violation: {violations[0]}" if violations else "   no violation (unexpected)")


def double_shuffle_story(policy: KernelPolicy) -> None:
    n, k = O_PROJ_TP8
    weight = _synthetic_weight(n, k, seed=2)
    lin = BlockScaledLinear("o_proj", weight)
    lin.shuffle_weight(by="model-side preshuffle")
    lin.load(policy, "mi355x")
    reference = BlockScaledLinear("o_proj", weight).attach(get_kernel("torch-reference"))
    x = _tokens(16, k, seed=3)
    call = lin.run(x)
    rel = error_metrics(call.output, reference(call.input))["rel_l2"]
    found = identify_weight_layout(lin.weight.data, weight.data)
    print(f"\n2. Double shuffle - o_proj (N={n}, K={k}), shuffled by the model, then loaded")
    print(f"   weight history: {lin.weight.layout}")
    print(f"   forensics on the bytes: {found}")
    print(f"   rel err vs reference at M=16: {rel:.2e}  {_verdict(rel)}")
    print(f"   contract violation: {call.violations[0]}")


def direct_read_story(policy: KernelPolicy) -> None:
    n, k = KV_B_PROJ_TP8
    weight = _synthetic_weight(n, k, seed=4)
    print(f"\n3. Direct read of a relaid weight - kv_b_proj (N={n}, K={k}), read raw by absorbed decode")
    for label, kernel_options in (("PR #51692 (flag ignored)", False), ("PR #56433 (flag honoured)", True)):
        local = KernelPolicy(
            policy.priority,
            tuned=policy.tuned,
            kernel_options={"aiter-bpreshuffle": {"honour_layer_flags": kernel_options}},
        )
        lin = BlockScaledLinear("kv_b_proj", weight, skip_weight_relayout=True).load(local, "mi355x")
        # Absorbed decode builds W_UK / W_UV from the weight bytes as a plain (N, K) matrix.
        w_direct = lin.weight.fmt.decode(lin.weight.data)
        rel = error_metrics(w_direct, weight.fmt.decode(weight.data))["rel_l2"]
        violation = weight_read_violation(
            "absorbed decode (W_UK/W_UV)", "kv_b_proj", lin.weight.layout, None, k, 1, direct_reader=True
        )
        print(f"   {label}: weight {lin.weight.layout}; W_UK/W_UV rel err {rel:.2e}  {_verdict(rel)}")
        if violation:
            print(f"   contract violation: {violation_sentence(violation)}")


DESCRIPTION = (
    "The three silent layout bugs of aiter's preshuffled FP8 GEMM, one GEMM at a time, on DeepSeek-V3's TP8 "
    "shapes with vLLM's kernel choice after PR #51692, emulated on the CPU: scale order (ROW_MAJOR scales "
    "given to a kernel that reads COL_MAJOR), a weight shuffled twice, and absorbed decode reading a weight "
    "the kernel re-laid out. Every number comes from running the emulated kernels."
)


def add_parser(sub) -> None:
    from .common import add_command

    add_command(sub, "kernel-demo", run, "the silent layout bugs, one GEMM at a time", DESCRIPTION)


def run(args: argparse.Namespace | None = None) -> int:
    """The three stories (the command has no options)."""
    start = time.perf_counter()
    mi355x = platform("mi355x")
    tuned = TunedTable.default()
    policy = KernelPolicy.for_platform(mi355x, tuned=tuned, native=False)
    print("mla_debug kernel demo: silent layout bugs of aiter's preshuffled FP8 GEMM (CPU emulation)")
    print(f"platform {mi355x.name}: {mi355x.description}, {mi355x.fp8.name}; kernel priority {policy.priority}")
    print(f"tuned table: {tuned.source}\n")
    scale_order_story(policy)
    double_shuffle_story(policy)
    direct_read_story(policy)
    print(f"\ndone in {time.perf_counter() - start:.1f} s")
    return 0
