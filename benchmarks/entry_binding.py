"""Host cost of binding a call to the unfused norm + quant paths, which take the fused op's signature.

  PYTHONPATH=. python3 benchmarks/entry_binding.py [--calls 200000] [--repeats 7] [--out FILE]

Times one call, in microseconds (median of `--repeats` rounds of `--calls` calls each), made with the
arguments a V4 caller passes (q, q_weight, q_eps, k, k_weight positionally, transpose_scale by keyword):
a plain Python function with the same 13 parameters (the entry as it was written out before), the
entries' bind rule (`normquant.entries`, handing the arguments to a stub), `inspect.Signature.bind` with
`apply_defaults` (what the rule avoids), and `validate_inputs` on the same tensors (what each call
then does anyway). Prints a markdown table with each cost relative to validate_inputs.
"""

from __future__ import annotations

import argparse
import statistics
import timeit

import torch

from benchmarks.harness import environment, markdown_table, write_report


def main() -> None:
    parser = argparse.ArgumentParser(description="host cost of the norm + quant entries' call binding")
    parser.add_argument("--calls", type=int, default=200_000, help="calls per timed round (default 200000)")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds; the median is reported (default 7)")
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()

    from mla_debug.normquant import norm_then_quant
    from mla_debug.normquant._inputs import validate_inputs
    from mla_debug.normquant.entries import _entry, _signature

    signature = _signature("aiter", drop=("backend",))
    bound = _entry("norm_then_quant", signature, norm_then_quant, lambda arguments: arguments)

    def plain(q, q_weight, q_eps, k=None, k_weight=None, k_eps=None, residual=None, group_size=128,
              transpose_scale=False, fmt="e4m3fn", flavor="aiter", gemma_norm=False, return_unquantized=False):
        return q

    def with_bind(*a, **kw):
        call = signature.bind(*a, **kw)
        call.apply_defaults()
        return call.arguments

    q, w = torch.randn(4, 1024).bfloat16(), torch.ones(1024)
    k, kw = torch.randn(4, 512).bfloat16(), torch.ones(512)
    cases = {
        "plain function, same parameters": lambda: plain(q, w, 1e-6, k, kw, transpose_scale=True),
        "entries' bind rule": lambda: bound(q, w, 1e-6, k, kw, transpose_scale=True),
        "Signature.bind + apply_defaults": lambda: with_bind(q, w, 1e-6, k, kw, transpose_scale=True),
        "validate_inputs": lambda: validate_inputs(
            "op", q, w, 1e-6, k, kw, None, None, 128, True, "e4m3fn", "aiter", False
        ),
    }
    micro = {}
    for name, fn in cases.items():
        fn()
        rounds = [timeit.timeit(fn, number=args.calls) / args.calls * 1e6 for _ in range(args.repeats)]
        micro[name] = statistics.median(rounds)
    base = micro["validate_inputs"]
    rows = [(name, f"{us:.2f}", f"{us / base:.2f}x") for name, us in micro.items()]
    text = environment() + "\n\n" + markdown_table(("per call", "us", "of validate_inputs"), rows)
    print(text)
    write_report(args.out, text)


if __name__ == "__main__":
    main()
