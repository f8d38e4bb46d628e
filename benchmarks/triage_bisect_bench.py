"""Time a default triage with bisection (what `mla-debug triage` runs), wall clock and CPU time.

  PYTHONPATH=. python3 benchmarks/triage_bisect_bench.py [--model deepseek-v4-flash] [--tp 1,2,4,8]
      [--modes prefill decode] [--tokens 16] [--scenario vllm-pr51692] [--platform mi355x] [--out FILE]
      [--json OUT]

Builds the TriageSession (synthetic weights of the real dimensions, seed 0), then runs `md.triage` with
bisection, and prints a Markdown table (under the harness's environment line) of one row: session and triage seconds (wall), CPU seconds of the
whole process (all threads: on a shared machine wall time grows with the other jobs' load, CPU time much
less), peak RSS, the load average before and after, the bisection's trial counts, and the verdicts and
culprits, so that two versions of the code can be compared on the same answers. It reads only the
public API that both the earlier and the current triage offer (`TriageSession`, `triage`, `TriageResult`), so
pointing PYTHONPATH at an older checkout times that one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks.harness import environment, int_list, markdown_table, peak_rss_gb, write_report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deepseek-v4-flash")
    parser.add_argument("--platform", default="mi355x")
    parser.add_argument("--scenario", default="vllm-pr51692")
    parser.add_argument("--tp", type=int_list, default=[1, 2, 4, 8], help="TP sizes, e.g. 1,2,4,8")
    parser.add_argument("--modes", nargs="+", default=["prefill", "decode"])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--label", default="", help="what this run is (e.g. 'before', 'after')")
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--json", default=None, help="also write the figures here as JSON")
    args = parser.parse_args(argv)

    import torch

    import mla_debug as md
    from mla_debug.triage import TriageSession, triage

    load_before = os.getloadavg()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    session = TriageSession(args.model, args.platform, args.tokens, seed=0, progress=False)
    wall1 = time.perf_counter()
    result = triage(
        scenario=args.scenario, tp_sizes=tuple(args.tp), modes=tuple(args.modes), session=session, progress=False
    )
    wall2, cpu2 = time.perf_counter(), time.process_time()
    stats = getattr(result, "bisection", None)
    figures = {
        "label": args.label,
        "model": args.model,
        "platform": args.platform,
        "scenario": args.scenario,
        "tp": args.tp,
        "modes": args.modes,
        "tokens": args.tokens,
        "session_s": round(wall1 - wall0, 1),
        "triage_s": round(wall2 - wall1, 1),
        "total_s": round(wall2 - wall0, 1),
        "cpu_s": round(cpu2 - cpu0, 1),
        "peak_rss_gb": round(peak_rss_gb(), 2),
        "load_before": [round(x, 1) for x in load_before],
        "load_after": [round(x, 1) for x in os.getloadavg()],
        "trials": getattr(stats, "trials", None),
        "runs": getattr(stats, "runs", None),
        "reused": getattr(stats, "reused", None),
        "skipped": getattr(stats, "skipped", None),
        "verdicts": [
            f"TP{c.tp} {c.mode} {c.verdict} {c.diff.first_divergent_step or ''}".strip() for c in result.configs
        ],
        "culprits": [f"TP{k.tp} {k.mode}: {k.change}" for k in result.culprits],
        "unresolved": [f"TP{tp} {mode}" for tp, mode in result.unresolved],
        "versions": f"mla_debug {md.__version__}, torch {torch.__version__}, Python {sys.version.split()[0]}",
        "threads": torch.get_num_threads(),
    }
    header = ["label", "model", "total s", "session s", "triage s", "CPU s", "peak RSS GB", "load before / after"]
    header += ["trials", "runs"]
    row = [figures[k] for k in ("label", "model", "total_s", "session_s", "triage_s", "cpu_s", "peak_rss_gb")]
    row += [f"{figures['load_before'][0]} / {figures['load_after'][0]}", figures["trials"], figures["runs"]]
    lines = [environment(), "", markdown_table(header, [row]), ""]
    lines += [f"    {line}" for line in figures["verdicts"] + figures["culprits"] + figures["unresolved"]]
    text = "\n".join(lines)
    print(text)
    write_report(args.out, text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
