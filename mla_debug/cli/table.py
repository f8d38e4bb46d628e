"""The plain-text table of the subcommands that print one row per item (kernels, layouts): columns
padded to their widest cell and the last one left whole, so a long explanation wraps in the terminal
instead of widening every row. The triage and trace tables are rich tables: they colour verdicts."""

from __future__ import annotations

from collections.abc import Sequence


def print_columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns separated by at least two spaces; the last one unpadded."""
    lines = [tuple(map(str, row)) for row in [header, *rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1])
