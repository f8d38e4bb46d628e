"""Heatmap figures: shapes, labels, marks and hover text follow the triage result."""

from __future__ import annotations

import html
import math
import subprocess
import sys

import pytest
from viz_triage_cases import BUGGY, TP_SIZES, result

from mla_debug.viz import block_heatmap, error_heatmap
from mla_debug.viz._cells import flat_range, log10_grid


def _plain(text: str) -> str:
    """Hover text as words: line breaks and wrapping indents removed, entities decoded."""
    return " ".join(html.unescape(text.replace("<br>", " ")).split())


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_error_heatmap_rows_are_tp_sizes_and_columns_steps_in_layer_order(mode):
    r = result(BUGGY)
    fig = error_heatmap(r, mode)
    heat, marks = fig.data
    steps = [s.name for s in r.config(TP_SIZES[0], mode).diff.steps]
    assert list(heat.x) == steps
    assert list(heat.y) == [f"TP{tp}" for tp in TP_SIZES]
    assert len(heat.z) == len(TP_SIZES) and all(len(row) == len(steps) for row in heat.z)
    for i, tp in enumerate(TP_SIZES):
        for j, step in enumerate(r.config(tp, mode).diff.steps):
            if math.isfinite(step.rel_err) and step.rel_err > 0:
                assert heat.z[i][j] == pytest.approx(math.log10(step.rel_err))
            hover = _plain(heat.customdata[i][j])
            assert _plain(step.kernel) in hover and _plain(step.classification) in hover

    diverged = [(f"TP{c.tp}", s.name) for c in r.configs if c.mode == mode for s in c.diff.steps if s.diverged]
    assert sorted(zip(marks.y, marks.x)) == sorted(diverged)
    assert len(fig.layout.shapes) == len(diverged)
    assert mode in fig.layout.title.text


def test_error_heatmap_hover_names_the_violation():
    r = result(BUGGY)
    fig = error_heatmap(r, "decode")
    step = r.config(TP_SIZES[-1], "decode").diff.first_divergent
    j = list(fig.data[0].x).index(step.name)
    hover = fig.data[0].customdata[-1][j]
    assert "[effective]" in hover and str(step.effective_violations[0].kind) in hover


def test_error_heatmap_rejects_a_mode_it_did_not_run():
    with pytest.raises(ValueError, match="was not triaged"):
        error_heatmap(result(BUGGY), "train")


def test_block_heatmap_defaults_to_the_first_divergent_step():
    r = result(BUGGY)
    tp = TP_SIZES[-1]
    first = r.config(tp, "decode").diff.first_divergent_step
    fig = block_heatmap(r, tp, "decode")
    errors = r.block_errors(tp, "decode", first)
    assert (len(fig.data[0].z), len(fig.data[0].z[0])) == tuple(errors.shape)
    assert f"<b>{first}</b>" in fig.layout.title.text and "first divergent step" in fig.layout.title.text
    assert list(fig.data[0].y) == list(range(errors.shape[0]))
    # A cell's hover holds its error only; where the block lies comes from its column's category.
    heat = fig.data[0]
    assert [x.split(":")[0] for x in heat.x] == [f"block {b}" for b in range(errors.shape[1])]
    assert "%{x}" in heat.hovertemplate and "%{customdata}" in heat.hovertemplate
    kept = r.report().blocks(tp, "decode").errors  # what the heatmap draws: the report's rounded copy
    assert kept[0][0] == pytest.approx(errors[0, 0].item(), rel=1e-5)
    assert heat.customdata[0][0] == f"{kept[0][0]:.2e}"


def test_block_heatmap_of_a_step_a_saved_report_does_not_keep():
    report = result(BUGGY).report()
    with pytest.raises(KeyError, match=r"keeps no block errors of TP1 prefill o_proj .*block_steps"):
        block_heatmap(report, 1, "prefill", step="o_proj")
    kept = result(BUGGY).report(block_steps=[(1, "prefill", "o_proj")])
    assert "<b>o_proj</b>" in block_heatmap(kept, 1, "prefill", step="o_proj").layout.title.text


def test_block_heatmap_of_a_chosen_step_and_a_wrong_one():
    r = result(BUGGY)
    fig = block_heatmap(r, 1, "prefill", step="o_proj")
    assert "<b>o_proj</b>" in fig.layout.title.text
    assert tuple(r.block_errors(1, "prefill", "o_proj").shape) == (len(fig.data[0].z), len(fig.data[0].z[0]))
    with pytest.raises(KeyError, match="no step"):
        block_heatmap(r, 1, "prefill", step="absorb_uk")  # a decode-only step


def test_log10_grid_keeps_zeros_and_non_finite_visible():
    z, low, high = log10_grid([[0.0, 1e-3, None], [math.inf, 2.0, math.nan]])
    assert (low, high) == (-3.0, 1.0)
    assert z == [[-3.0, pytest.approx(-3.0), None], [1.0, pytest.approx(math.log10(2.0)), 1.0]]


def test_flat_range_names_heads_of_3d_outputs():
    assert flat_range(0, 127, (512,)) == "columns 0-127"
    assert flat_range(640, 767, (16, 512)) == "head 1, columns 128-255"
    assert flat_range(128, 255, (16, 192)).startswith("flattened columns 128-255")


def test_importing_viz_does_not_import_plotly():
    code = "import sys, mla_debug, mla_debug.viz; sys.exit('plotly' in sys.modules or 'pandas' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
