"""`mla-debug triage`: the main job from the terminal - summary table, culprits, HTML and JSON reports."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "triage",
        help="run a layer at several TP sizes under a serving scenario and find where and why it diverges",
        description="Run one attention layer at every TP size and mode under each scenario, compare every step "
        "with the reference run, and name the smallest change that restores each diverged configuration.",
    )
    parser.add_argument("--model", default="deepseek-v3", help="preset name (ignored with --checkpoint)")
    parser.add_argument("--platform", default="mi355x")
    parser.add_argument(
        "--scenario",
        nargs="+",
        default=["vllm-pr51692"],
        help="scenario names or YAML/JSON scenario files; several share one set of reference runs",
    )
    parser.add_argument("--tp", nargs="+", type=int, default=[1, 2, 4, 8], help="TP sizes")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--modes", nargs="+", default=["prefill", "decode"], choices=["prefill", "decode"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="checkpoint folder (safetensors, Hugging Face layout)")
    parser.add_argument("--layer", type=int, default=0, help="layer index inside --checkpoint")
    parser.add_argument("--report", default=None, help="write a self-contained HTML report here (never overwritten)")
    parser.add_argument("--json", default=None, help="write the JSON summary here (never overwritten)")
    parser.add_argument("--no-bisect", action="store_true", help="skip the culprit search")
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default=None,
        help="where to compute (default: the GPU for an NVIDIA platform when one is visible, else the CPU)",
    )
    parser.set_defaults(func=run)


def _paths_for(base: str | None, scenario: str, several: bool) -> Path | None:
    if base is None:
        return None
    path = Path(base)
    return path.with_name(f"{path.stem}-{scenario}{path.suffix}") if several else path


def render(result, console: Console) -> None:
    """The summary table (diverged rows in red) and the culprit sentences."""
    table = Table(title=f"{result.model} on {result.platform} under {result.scenario} ({result.tokens} tokens)")
    for column in ("TP", "mode", "verdict", "first divergent step", "worst step", "worst rel err", "violations"):
        table.add_column(column)
    for row in result.summary.itertuples():
        diverged = row.verdict == "diverged"
        err = row.worst_rel_err
        table.add_row(
            str(row.tp),
            row.mode,
            f"[bold red]{row.verdict}[/]" if diverged else f"[green]{row.verdict}[/]",
            row.first_divergent_step if isinstance(row.first_divergent_step, str) else "-",
            str(row.worst_step),
            f"{err:.2e}" if isinstance(err, float) and math.isfinite(err) else str(err),
            row.violations or "-",
            style="red" if diverged else None,
        )
    console.print(table)
    render_culprits(result, console)


def render_culprits(result, console: Console) -> None:
    """Culprit groups with what to do about each, the unresolved configurations, provenance in one line."""
    from rich.markup import escape

    from .viz.culprits import action_lines, bisection_line, configs_label, group_heading

    for group in result.culprit_groups:
        console.print(f"[bold]culprit[/] {escape(group_heading(group))}")
        for line in action_lines(group):
            more = f"; {len(line.alternatives)} other minimal alternative(s) in the report" if line.alternatives else ""
            console.print(f"  [bold]{line.label}[/]: {escape(line.action)} {line.outcome} ({escape(line.note)}{more})")
    if result.unresolved:
        labels = configs_label(result.unresolved)
        console.print(
            f"[yellow]no code change set of up to three changes and no kernel disable restores {labels}; "
            "see the step table[/]"
        )
    if not any(c.verdict == "diverged" for c in result.configs):
        console.print("[green]every TP size and mode matches the reference within its FP8 noise floor[/]")
    if any(c.verdict == "diverged" for c in result.configs) and result.bisection.trials:
        console.print(f"[dim]{escape(bisection_line(result.bisection))}[/]")
    if result.provenance is not None:
        console.print(f"[dim]provenance: {escape(result.provenance.line())}[/]")


def run(args: argparse.Namespace) -> int:
    from .analysis import Workbench, triage
    from .scenarios import scenario as scenario_of

    console = Console()
    scenarios = [scenario_of(spec) for spec in args.scenario]
    bench = Workbench(
        args.model, args.platform, args.tokens, args.seed, args.checkpoint, layer=args.layer, device=args.device
    )
    several = len(scenarios) > 1
    for scen in scenarios:
        result = triage(
            scenario=scen,
            tp_sizes=tuple(args.tp),
            modes=tuple(args.modes),
            bench=bench,
            find_culprits=not args.no_bisect,
            progress=True,
        )
        render(result, console)
        html = _paths_for(args.report, scen.name, several)
        if html is not None:
            console.print(f"report: {result.to_html(html)}")
        js = _paths_for(args.json, scen.name, several)
        if js is not None:
            console.print(f"json: {result.to_json(js)}")
    return 0
