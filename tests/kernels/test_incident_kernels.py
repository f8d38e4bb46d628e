"""The kernel behaviours the incidents need: the miscompiled CK bpreshuffle stand-in (a value fault on a few
rows, layouts intact), and aiter-bpreshuffle behind SGLang's materializer (scale read by its strides), with
the fused producer's two presentations of a transposed scale."""

from __future__ import annotations

import pytest
import torch
from helpers import linear, random_tokens, random_weight

import mla_debug as md
from mla_debug.layouts import ScaleLayout
from mla_debug.model.fused_producer import restrided, written_layout

MI355X = md.kernels.platform("mi355x")


def _run(kernel, weight, x, **options):
    return linear("proj", weight, kernel, **options).run(x)


@pytest.mark.parametrize("m", [12, 55, 56, 64, 100])
def test_the_miscompiled_stand_in_gets_only_tile_edge_rows_wrong_from_m_56(m):
    gen = torch.Generator().manual_seed(m)
    weight = random_weight(256, 512, gen, fmt=MI355X.fp8)
    x = random_tokens(m, 512, gen)
    good = _run("aiter-bpreshuffle", weight, x)
    bad = _run("aiter-bpreshuffle-gfx950-rocm72", weight, x)
    assert bad.violations == good.violations == []  # bytes and layouts as the correct kernel reads them
    wrong = sorted({int(r) for r in (bad.output != good.output).any(dim=1).nonzero().flatten()})
    expected = [r for r in range(15, m, 16)] if m >= 56 else []
    assert wrong == expected


def test_the_stand_in_refuses_bad_options():
    with pytest.raises(ValueError, match="min_m must be a positive integer"):
        md.get_kernel("aiter-bpreshuffle-gfx950-rocm72", min_m=0)
    with pytest.raises(ValueError, match="scale_read 'x' is not one of raw, strides"):
        md.get_kernel("aiter-bpreshuffle", scale_read="x")


def test_a_materializing_consumer_misreads_the_view_and_reads_the_strided_presentation():
    gen = torch.Generator().manual_seed(0)
    weight = random_weight(256, 512, gen, fmt=MI355X.fp8)
    x = random_tokens(8, 512, gen).to(torch.float32)
    view = md.quantize_groups(x, 128, fmt=MI355X.fp8, flavor="aiter-fused", scale_layout=written_layout(True))
    strided = restrided(view)
    assert view.scale_layout is ScaleLayout.COL_MAJOR and strided.scale_layout is ScaleLayout.COL_MAJOR_STRIDED
    assert strided.scale.stride() == (1, 8) and strided.scale.data_ptr() == view.scale.data_ptr()  # no copy
    assert written_layout(True, strided=True) is ScaleLayout.COL_MAJOR_STRIDED
    assert written_layout(False, strided=True) is ScaleLayout.ROW_MAJOR
    raw = _run("aiter-bpreshuffle", weight, view)
    assert raw.violations == []  # CK reads column-major bytes: the view is right for it
    mat_view = _run("aiter-bpreshuffle", weight, view, scale_read="strides")
    assert [v.kind for v in mat_view.violations] == [md.layouts.ViolationKind.SCALE_ORDER]
    mat_strided = _run("aiter-bpreshuffle", weight, strided, scale_read="strides")
    assert mat_strided.violations == [] and torch.equal(mat_strided.output, raw.output)
    assert not torch.equal(mat_view.output, raw.output)
