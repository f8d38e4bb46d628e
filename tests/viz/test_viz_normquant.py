"""Plots of the norm+quant accuracy study: the figures build, with the study's numbers in them."""

from __future__ import annotations

import math

import pytest
import torch

import mla_debug.normquant.study as S
from mla_debug.viz import error_histogram, group_error_heatmap
from mla_debug.viz.normquant_plots import DOUBLE_ROUNDING_BOUND, SINGLE_ROUNDING_BOUND


@pytest.fixture(scope="module")
def acc():
    return S.measure_accuracy(S.make_inputs("mixed", 16, 512, seed=0), backend="torch")


def test_group_heatmap_is_rows_by_groups_of_the_metric(acc):
    fig = group_error_heatmap(acc, "fused")
    (heat,) = fig.data
    assert heat.type == "heatmap"
    assert list(heat.x) == [0, 1, 2, 3] and list(heat.y) == list(range(16))
    assert [list(row) for row in heat.z] == acc.group_matrix("fused", "max_err_ulp").tolist()
    assert "max_err_ulp of fused" in fig.layout.title.text and "mixed" in fig.layout.title.text
    assert "row 3 (input x 0.0e+00)" in heat.customdata[3][0]  # a zero row says so in its hover


def test_difference_heatmap_is_centred_on_zero(acc):
    fig = group_error_heatmap(acc, "unfused", "l2_err", minus="fused")
    (heat,) = fig.data
    expected = acc.group_matrix("unfused", "l2_err") - acc.group_matrix("fused", "l2_err")
    assert torch.allclose(torch.tensor([list(r) for r in heat.z], dtype=torch.float64), expected)
    assert heat.zmid == 0 and heat.zmin == -heat.zmax and heat.zmax == pytest.approx(float(expected.abs().max()))
    assert "l2_err(unfused) - l2_err(fused)" in fig.layout.title.text


def test_log_heatmap_of_relative_error(acc):
    (heat,) = group_error_heatmap(acc, "fused", "rel_l2", log=True).data
    rel = acc.group_matrix("fused", "rel_l2")
    i, j = 0, 0
    assert heat.z[i][j] == pytest.approx(math.log10(float(rel[i, j])))
    assert len(heat.colorbar.ticktext) > 0


def test_histogram_overlays_one_bar_trace_per_path_with_the_bounds(acc):
    fig = error_histogram(acc, ("fused", "unfused"), bins=40)
    assert [t.type for t in fig.data] == ["bar", "bar"] and [t.name for t in fig.data] == ["fused", "unfused"]
    assert fig.layout.barmode == "overlay" and fig.layout.yaxis.type == "log"
    for trace, path in zip(fig.data, ("fused", "unfused")):
        assert len(trace.x) == len(trace.y) == 40
        assert sum(trace.y) == acc.errors[path].err_ulp.numel()  # every element is counted once
    # the fused errors all fall at or below the single-rounding bound, which is drawn
    fused_x, fused_y = fig.data[0].x, fig.data[0].y
    width = fig.data[0].width
    assert all(y == 0 for x, y in zip(fused_x, fused_y) if x - width / 2 > SINGLE_ROUNDING_BOUND + 1e-3)
    assert sorted(s.x0 for s in fig.layout.shapes) == [SINGLE_ROUNDING_BOUND, DOUBLE_ROUNDING_BOUND]


def test_plots_reject_unknown_paths(acc):
    with pytest.raises(ValueError, match="path 'fp16' was not measured"):
        group_error_heatmap(acc, "fp16")
    with pytest.raises(ValueError, match="path 'fp16' was not measured"):
        error_histogram(acc, ("fused", "fp16"))
