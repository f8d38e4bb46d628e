"""The CLI reference page, written from the `mla-debug` argument parsers themselves.

Every command and subcommand gets its summary, description, usage line and a table of its options with
their help text, exactly as `mla-debug COMMAND --help` states them, so the page cannot drift from the
parsers (a new option shows up at the next build).
"""

from __future__ import annotations

import argparse
import re

from markdown_text import markdown_text

# Usage lines are wrapped at this width whatever the terminal that builds the site.
WIDTH = 100

INTRO = """# Command line reference

`mla-debug` is installed with the package (`pip install -e .`, or any `make` target);
`python -m mla_debug.cli` is the same command. Every error is one line,
`mla-debug COMMAND: error: MESSAGE`, with exit status 2.

This page is generated from the argument parsers at build time: it says what `mla-debug COMMAND --help`
says. The task-oriented walk-throughs are in the guides ([triage](triage.md), [capture](capture.md),
[profiling](profiling.md)).
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order they were added (aliases once)."""
    out, seen = [], set()
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            out.append((name, helps.get(name, ""), sub))
    return out


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog=parser.prog, width=WIDTH, max_help_position=40)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    formatter = _formatter(parser)
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        invocation = formatter._format_action_invocation(action)
        meaning = " ".join(formatter._expand_help(action).split()) if action.help else ""
        rows.append((invocation, meaning))
    return rows


def _section(parser: argparse.ArgumentParser, summary: str, level: int) -> list[str]:
    lines = [f"{'#' * level} `{parser.prog}`", ""]
    if summary:
        lines += [markdown_text(summary[0].upper() + summary[1:]) + ".", ""]
    if parser.description and parser.description != summary:
        lines += [markdown_text(" ".join(parser.description.split())), ""]
    lines += ["```text", _usage(parser), "```", ""]
    rows = _option_rows(parser)
    if rows:
        lines += ["| option | meaning |", "|---|---|"]
        lines += [f"| `{invocation}` | {markdown_text(meaning)} |" for invocation, meaning in rows]
        lines.append("")
    for _name, help_text, sub in _subcommands(parser):
        lines += _section(sub, help_text, min(level + 1, 4))
    return lines


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """The whole reference page for `parser` (the `mla-debug` parser and every subcommand under it)."""
    lines = [INTRO]
    lines += ["## Commands", ""]
    lines += [
        f"- [`{name}`](#{_anchor(sub.prog)}): {markdown_text(help_text)}"
        for name, help_text, sub in _subcommands(parser)
    ]
    lines.append("")
    lines += _section(parser, "", 2)
    return "\n".join(lines)


def _anchor(prog: str) -> str:
    """The id Python-Markdown's toc gives the heading `` `prog` `` (lowercase, spaces to dashes)."""
    return re.sub(r"[^\w\- ]", "", prog).strip().lower().replace(" ", "-")
