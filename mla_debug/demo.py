"""`make demo`: the main job on built-in defaults.

A TP triage of DeepSeek-V3 (real dimensions, synthetic weights) on an MI355X under vLLM PR #51692 and
under its fix PR #56433: which TP sizes and modes diverge, at which step, why, and which change restores
them. The HTML and JSON reports go to a fresh folder under ./reports, named at the end.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from pathlib import Path

from rich.console import Console

SCENARIOS = ("vllm-pr51692", "vllm-pr56433")


def fresh_folder(root: Path, stem: str) -> Path:
    """A new folder under `root` that did not exist before (never reuses a user's earlier run)."""
    root.mkdir(parents=True, exist_ok=True)
    base = f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    for n in range(1, 1000):
        folder = root / (base if n == 1 else f"{base}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"no free report folder under {root}")


def main(argv: list[str] | None = None) -> int:
    from .analysis import Workbench, triage
    from .cli_triage import render

    parser = argparse.ArgumentParser(prog="mla-debug demo", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deepseek-v3")
    parser.add_argument("--platform", default="mi355x")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--tp", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--out", default="reports", help="folder under which a fresh report folder is made")
    args = parser.parse_args(argv)

    console = Console()
    start = time.perf_counter()
    console.print(
        f"[bold]mla_debug[/]: TP triage of {args.model} on {args.platform}, {args.tokens} tokens, "
        f"TP {' '.join(map(str, args.tp))}, prefill and decode, under {' and '.join(SCENARIOS)}"
    )
    bench = Workbench(args.model, args.platform, args.tokens, seed=0)
    folder = fresh_folder(Path(args.out), f"demo-{args.model}-{args.platform}")
    for name in SCENARIOS:
        result = triage(scenario=name, tp_sizes=tuple(args.tp), bench=bench, progress=True)
        render(result, console)
        result.to_html(folder / f"triage-{name}.html")
        result.to_json(folder / f"triage-{name}.json")
    console.print(f"\ndone in {time.perf_counter() - start:.1f} s; reports written to {folder.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
