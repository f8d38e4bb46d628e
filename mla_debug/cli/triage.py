"""`mla-debug triage`: the main job from the terminal - summary table, culprits, activation-patching
checks, HTML and JSON reports."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


def add_parser(sub) -> None:
    from .args import (
        MODES,
        add_checkpoint,
        add_device,
        add_model,
        add_output_file,
        add_platform,
        add_scenario,
        add_seed,
        add_start_position,
        add_tokens,
        add_tp,
    )
    from .common import add_command

    parser = add_command(
        sub,
        "triage",
        run,
        "run a layer at several TP sizes under a serving scenario and find where and why it diverges",
        "Run one attention layer at every TP size and mode under each scenario, compare every step with the "
        "reference run, and name the smallest change that restores each diverged configuration. Options are "
        "checked before any weight is built or read.",
    )
    add_model(parser, "deepseek-v3", note="; with --checkpoint its config.json is used")
    add_platform(parser)
    add_scenario(parser, several=True)
    add_tp(parser, [1, 2, 4, 8])
    add_tokens(parser)
    add_start_position(parser)
    parser.add_argument(
        "--modes",
        nargs="+",
        default=list(MODES),
        choices=MODES,
        help="prefill (the full attention) and/or decode (MLA's absorbed form) (default: both)",
    )
    add_seed(parser)
    add_checkpoint(parser)
    add_output_file(parser, "--report", ".html", "a self-contained HTML report", "report")
    add_output_file(parser, "--json", ".json", "the JSON summary", "summary")
    parser.add_argument("--no-bisect", action="store_true", help="skip the culprit search")
    add_device(parser, None)


def _paths_for(base: str | None, scenario: str, several: bool) -> Path | None:
    if base is None:
        return None
    path = Path(base).expanduser()
    return path.with_name(f"{path.stem}-{scenario}{path.suffix}") if several else path


def _summary_table(result, violations: bool) -> Table:
    """The summary of a TriageReport as a rich table (diverged rows in red); the title says where the
    tokens sat."""
    from ..viz.caveats import positions_text

    where = positions_text(result.positions, result.tokens)
    table = Table(
        title=f"{result.model} on {result.platform} under {result.scenario} ({result.tokens} tokens at {where})"
    )
    columns = ("TP", "mode", "verdict", "first divergent step", "worst step", "worst rel err")
    for column in columns + (("violations",) if violations else ()):
        # A narrow column folds a long step name onto the next line; rich's default would cut it to "..."
        table.add_column(column, overflow="fold")
    for row in result.summary.itertuples():
        diverged = row.verdict == "diverged"
        err = row.worst_rel_err
        cells = [
            str(row.tp),
            row.mode,
            f"[bold red]{row.verdict}[/]" if diverged else f"[green]{row.verdict}[/]",
            row.first_divergent_step if isinstance(row.first_divergent_step, str) else "-",
            str(row.worst_step),
            f"{err:.2e}" if isinstance(err, float) and math.isfinite(err) else str(err),
        ]
        table.add_row(*cells, *([row.violations or "-"] if violations else []), style="red" if diverged else None)
    return table


def render(result, console: Console) -> None:
    """The summary table (diverged rows in red) and the culprit sentences of a TriageReport."""
    table = _summary_table(result, violations=True)
    # A pipe or log file is 80 columns wide, too narrow for "direct-read-of-relaid-weight" in a seventh
    # column: the violations then go under the table, one line per run, whole.
    width = console.options.max_width
    below = Measurement.get(console, console.options.update_width(10 * width), table).maximum > width
    if below:
        table = _summary_table(result, violations=False)
    console.print(table)
    render_caveats(result, console)
    render_profile(getattr(result, "profile", None), console)
    if below:
        for row in result.summary.itertuples():
            if row.violations:
                console.print(f"TP{row.tp} {row.mode} violations: {row.violations}", style="red", soft_wrap=True)
    render_culprits(result, console)


def render_caveats(result, console: Console) -> None:
    """What the verdicts do not cover, one line each (`viz.caveats`); the one that makes the numbers
    differ from the model's in red. A report older than schema 5 says its caveats were not recorded."""
    from rich.markup import escape

    from ..viz.caveats import caveat_lines

    if not result.caveats_recorded:
        console.print(f"[dim]caveats: not recorded (a schema {result.source_schema} report)[/]")
    for line in caveat_lines(result.caveats):
        style = "bold red" if line.warning else "yellow"
        console.print(f"[{style}]{escape(line.label)}[/]: {escape(line.text)}", soft_wrap=True)


def render_profile(resolution, console: Console, rules: bool = True) -> None:
    """How an engine profile was resolved (nothing for another scenario): the engine, the settings that
    differ from the release's defaults, and each applied rule with its source."""
    from rich.markup import escape

    from ..viz.profile import profile_heading, rule_lines

    if resolution is None:
        return
    console.print(f"[bold]engine profile[/] {escape(profile_heading(resolution))}", soft_wrap=True)
    if rules:
        for line in rule_lines(resolution):
            console.print(f"  [dim]rule[/] {escape(line)}", soft_wrap=True)


def render_culprits(result, console: Console) -> None:
    """Culprit groups of a TriageReport with what to do about each, the unresolved configurations,
    what activation patching says about the diverged configurations (one line per set that reads the
    same), provenance in one line."""
    from rich.markup import escape

    from ..viz.culprits import action_lines, bisection_line, configs_label, group_heading
    from ..viz.patching import patching_lines

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
    for line in patching_lines(result):
        style = None if line.recorded else "yellow"
        console.print(f"[bold]activation patching[/] at {escape(line.line)}", style=style)
    if not result.diverged_runs:
        within = " - within the caveats above" if result.caveats else ""
        console.print(f"[green]every TP size and mode matches the reference within its FP8 noise floor{within}[/]")
    if result.diverged_runs and result.bisection is not None and result.bisection.trials:
        console.print(f"[dim]{escape(bisection_line(result.bisection))}[/]")
    if result.provenance is not None:
        console.print(f"[dim]provenance: {escape(result.provenance.line())}[/]")


def _layer_options(args: argparse.Namespace) -> dict:
    """Which layer the options pick and how it is read, as `check_layer_options` and `TriageSession` take them."""
    return dict(
        layer=args.layer, start_position=args.start_position, quantize=args.quantize, ignore_extra=args.ignore_extra
    )


def check_args(args: argparse.Namespace) -> tuple[list, object]:
    """Every option checked before any weight is built or read (DeepSeek-V3's take seconds to build, a
    real checkpoint's much longer to read): returns (scenarios, platform). Raises ValueError & co."""
    from ..kernels import platform as platform_of
    from ..model.preflight import check_layer_options
    from ..triage.session import triage_session_device
    from .args import parse_settings, scenario_with_settings
    from .common import check_output_file

    if args.report is not None:
        check_output_file(args.report, ".html", "--report", "the HTML report")
    if args.json is not None:
        check_output_file(args.json, ".json", "--json", "the JSON summary")
    if len(set(args.modes)) < len(args.modes):
        raise ValueError(f"--modes {' '.join(args.modes)}: each mode once")
    plat = platform_of(args.platform)
    settings = parse_settings(args.settings)
    scenarios = [scenario_with_settings(spec, settings) for spec in args.scenario]
    check_layer_options(args.model, args.checkpoint, tp_sizes=args.tp, tokens=args.tokens, **_layer_options(args))
    if args.checkpoint is None and args.ignore_extra:
        raise ValueError("--ignore-extra applies to a --checkpoint; synthetic weights hold no unknown tensors")
    triage_session_device(args.device, plat)
    return scenarios, plat


def run(args: argparse.Namespace) -> int:
    from ..triage import TriageSession, triage, write_json
    from ..viz import write_html
    from .common import written

    scenarios, plat = check_args(args)
    console = Console()
    session = TriageSession(
        args.model, plat, args.tokens, args.seed, args.checkpoint, device=args.device, **_layer_options(args)
    )
    several = len(scenarios) > 1
    plain = dict(soft_wrap=True, markup=False, highlight=False)  # paths whole, a '[' in them is no markup
    for scen in scenarios:
        result = triage(
            scenario=scen,
            tp_sizes=tuple(args.tp),
            modes=tuple(args.modes),
            session=session,
            find_culprits=not args.no_bisect,
            progress=True,
        )
        report = result.report()
        render(report, console)
        html = _paths_for(args.report, scen.name, several)
        if html is not None:
            console.print(written("report", html, write_html(report, html)), **plain)
        js = _paths_for(args.json, scen.name, several)
        if js is not None:
            console.print(written("json", js, write_json(report, js)), **plain)
    return 0
