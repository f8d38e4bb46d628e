"""The same TP triage on the GPU (Triton kernels) and on the CPU (their emulation), timed side by side.

  PYTHONPATH=. python3 benchmarks/triage_gpu_bench.py --out triage_gpu.md [--model deepseek-v3] [--tokens 16]

Runs `md.triage(model, "h200", scenario)` for each scenario on device="cuda" and on device="cpu", each
with its own TriageSession (synthetic checkpoint of the real dimensions, same seed), and checks that both
devices reach the same verdicts and culprits. The GPU is timed twice - the first pass includes Triton's
compilation of every launch configuration, the second is warm - and the CPU once.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import mla_debug as md
from benchmarks.harness import environment, markdown_table, require_cuda, write_report

SCENARIOS = ("vllm-pr51692", "vllm-pr56433")


def run(session: md.TriageSession, scenarios) -> tuple[float, list]:
    start = time.perf_counter()
    results = [md.triage(session=session, scenario=s, progress=False) for s in scenarios]
    if session.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, results


def verdicts(results) -> list:
    return [([(c.tp, c.mode, c.verdict) for c in r.configs], [c.explanation for c in r.culprits]) for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deepseek-v3")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    require_cuda("triage_gpu_bench")
    scenarios = args.scenarios.split(",")
    lines = []
    times = {}
    outcome = {}
    for device in ("cuda", "cpu"):
        start = time.perf_counter()
        session = md.TriageSession(args.model, "h200", args.tokens, device=device)
        build = time.perf_counter() - start
        first, results = run(session, scenarios)
        times[device] = (build, first)
        outcome[device] = verdicts(results)
        if device == "cuda":
            warm, _ = run(session, scenarios)
            times["cuda warm"] = (0.0, warm)
        for r in results:
            lines.append(f"- {device} {r.scenario}: " + "; ".join(f"TP{c.tp} {c.mode} {c.verdict}" for c in r.configs))
            lines.extend(f"  - culprit: {c.explanation}" for c in r.culprits)
        print("\n".join(lines[-6:]), flush=True)
    same = outcome["cuda"] == outcome["cpu"]
    header = (
        f"{environment('cuda')}, {torch.get_num_threads()} CPU threads; model {args.model}, {args.tokens} tokens, "
        f"TP 1/2/4/8 x prefill/decode, scenarios {', '.join(scenarios)}"
    )
    cpu = times["cpu"][1]
    table = markdown_table(
        ["run", "session s", "triage s", "CPU / this"],
        [[name, f"{build:.1f}", f"{spent:.1f}", f"{cpu / spent:.1f}x"] for name, (build, spent) in times.items()],
    )
    text = "\n".join([header, "", table, "", f"same verdicts and culprits on both devices: {same}", "", *lines, ""])
    print(text)
    write_report(args.out, text)
    if not same:
        sys.exit("the GPU and CPU triage disagree")


if __name__ == "__main__":
    main()
