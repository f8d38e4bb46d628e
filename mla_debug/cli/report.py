"""`mla-debug report`: show a saved triage again - its summary, culprits and activation-patching checks,
and its HTML report - from the JSON alone, without re-running anything."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    from .args import add_output_file
    from .common import add_command

    parser = add_command(
        sub,
        "report",
        run,
        "show a saved triage (triage --json) again: summary, culprits, patching checks, and its HTML report",
        "Read a triage saved as JSON (`triage --json`, `TriageResult.to_json`; schemas 1 to 6), print its summary "
        "table, culprits and activation-patching checks, and with --html draw its self-contained HTML report again "
        "- the same report the triage wrote, made without re-running anything. Reports of older schemas keep less "
        "(no block heatmaps or patching checks, schema 1 no provenance); the HTML says what is missing.",
    )
    parser.add_argument("triage_json", metavar="TRIAGE.json", help="a triage report saved as JSON")
    add_output_file(parser, "--html", ".html", "the HTML report", "report")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..triage import load_triage
    from ..viz import write_html
    from .common import check_output_file, written
    from .triage import render

    # The output path is checked before the file is read: a typo costs nothing.
    html = check_output_file(args.html, ".html", "--html", "the HTML report") if args.html is not None else None
    report = load_triage(args.triage_json)
    console = Console()
    render(report, console)
    if html is not None:
        plain = dict(soft_wrap=True, markup=False, highlight=False)  # the path whole, a '[' in it is no markup
        console.print(written("report", html, write_html(report, html)), **plain)
    return 0
