"""Styled tables: they render, highlight what diverged, format errors and escape text."""

from __future__ import annotations

import dataclasses
import re

from viz_triage_cases import BUGGY, TP_SIZES, result

from mla_debug.viz import steps_styler, summary_styler
from mla_debug.viz.tables import DIVERGED_ROW, EFFECTIVE_CELL


def _styled_rows(styler) -> set[int]:
    """Row positions whose cells got the diverged background, read from the rendered CSS rules
    ('#T_<id>_row3_col0, ... { background-color: #f8d0d0; }')."""
    colour = DIVERGED_ROW.split(": ")[1]
    rows = set()
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", styler.to_html()):
        if colour in body:
            rows.update(int(n) for n in re.findall(r"_row(\d+)_col\d+", selectors))
    return rows


def test_summary_styler_marks_diverged_configurations():
    r = result(BUGGY)
    styler = summary_styler(r)
    text = styler.to_html()
    assert "diverged" in text and DIVERGED_ROW.split(": ")[1] in text
    expected = {i for i, c in enumerate(r.configs) if c.verdict == "diverged"}
    assert expected and _styled_rows(styler) == expected
    worst = r.config(TP_SIZES[0], "decode").diff.worst.rel_err
    assert f"{worst:.2e}" in text


def test_steps_styler_marks_diverged_steps_and_effective_violations():
    r = result(BUGGY)
    styler = steps_styler(r, TP_SIZES[-1], "decode")
    text = styler.to_html()
    steps = r.config(TP_SIZES[-1], "decode").diff.steps
    assert _styled_rows(styler) == {i for i, s in enumerate(steps) if s.diverged}
    assert EFFECTIVE_CELL.split("; ")[0].split(": ")[1] in text  # the effective-violation colour
    assert f"{steps[0].rel_err:.2e}" in text
    for s in steps:
        assert s.name in text


def test_steps_styler_of_a_clean_run_has_no_highlight():
    r = result(BUGGY)
    styler = steps_styler(r, TP_SIZES[0], "prefill")
    assert _styled_rows(styler) == set()
    assert "0 of" in styler.to_html()


def test_stylers_escape_text():
    r = dataclasses.replace(result(BUGGY), model="<script>x</script>")
    text = summary_styler(r).to_html()
    assert "<script>" not in text and "&lt;script&gt;" in text
