"""`make demo`: the main job on built-in defaults.

A TP triage of DeepSeek-V3 (real dimensions, synthetic weights) on an MI355X under vLLM PR #51692 and
under its fix PR #56433: which TP sizes and modes diverge, at which step, why, and which change restores
them. The HTML and JSON reports go to a fresh folder under ./reports, named at the end.

`make demo` runs `python -m mla_debug.cli demo`, the same command as `mla-debug demo`.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime

SCENARIOS = ("vllm-pr51692", "vllm-pr56433")
DESCRIPTION = (
    "The main job on built-in defaults: a TP triage of DeepSeek-V3 (real dimensions, synthetic weights) on an "
    "MI355X under vLLM PR #51692 and its fix PR #56433 - which TP sizes and modes diverge, where, why, and the "
    "change that restores them. HTML and JSON reports go to a fresh folder under --out."
)


def add_parser(sub) -> None:
    from .common import add_command

    summary = "the main job on defaults: TP triage of DeepSeek-V3 on MI355X (see make demo)"
    add_arguments(add_command(sub, "demo", run, summary, DESCRIPTION))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options."""
    from .args import add_model, add_platform, add_tokens, add_tp

    add_model(parser, "deepseek-v3")
    add_platform(parser)
    add_tokens(parser)
    add_tp(parser, [1, 2, 4, 8])
    parser.add_argument(
        "--out",
        default="reports",
        metavar="DIR",
        help="folder under which a fresh report folder is made; earlier runs are never touched (default: reports)",
    )


def run(args: argparse.Namespace) -> int:
    """The demo on parsed options; every option is checked before the weights are built."""
    from rich.console import Console

    from .._files import fresh_folder
    from ..kernels import platform as platform_of
    from ..model.preflight import check_layer_options
    from ..triage import TriageSession, triage, write_json
    from ..viz import write_html
    from .common import check_output_folder
    from .triage import render

    plat = platform_of(args.platform)
    check_layer_options(args.model, tp_sizes=args.tp, tokens=args.tokens)
    out = check_output_folder(args.out, "--out")

    console = Console()
    start = time.perf_counter()
    console.print(
        f"[bold]mla_debug[/]: TP triage of {args.model} on {plat.name}, {args.tokens} tokens, "
        f"TP {' '.join(map(str, args.tp))}, prefill and decode, under {' and '.join(SCENARIOS)}"
    )
    session = TriageSession(args.model, plat, args.tokens, seed=0)
    # A new folder per run, named by when it started; a second run in the same second gets "-2".
    folder = fresh_folder(out / f"demo-{args.model}-{plat.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    files = []
    for name in SCENARIOS:
        report = triage(scenario=name, tp_sizes=tuple(args.tp), session=session, progress=True).report()
        render(report, console)
        files.append(write_html(report, folder / f"triage-{name}.html"))
        files.append(write_json(report, folder / f"triage-{name}.json"))
    plain = dict(soft_wrap=True, markup=False, highlight=False)  # paths whole, a '[' in them is no markup
    console.print(f"\ndone in {time.perf_counter() - start:.1f} s; reports written to {folder.resolve()}:", **plain)
    for file in files:
        console.print(f"  {file.name}", **plain)
    return 0
