"""The cuBLAS adapter's padding (M to a multiple of 4, K blocks to a multiple of 4) is exact, and is
never applied to a scale that breaks the stride contract (which must reach torch and be rejected)."""

from __future__ import annotations

import pytest
import torch
from helpers import random_tokens, random_weight

import mla_debug as md
from mla_debug.kernels.cublas import _dense_weight, _padded_input


@pytest.mark.parametrize("m,k", [(1, 256), (3, 512), (4, 256), (17, 384), (8, 512)])
def test_padded_operands_dequantize_to_the_zero_padded_originals(m, k, gen):
    qa = md.quantize_groups(random_tokens(m, k, gen), scale_layout=md.ScaleLayout.COL_MAJOR_STRIDED)
    data, scale = _padded_input(qa)
    rows, cols = data.shape
    assert rows % 4 == 0 and (cols // 128) % 4 == 0 and scale.shape == (rows, cols // 128)
    assert scale.stride() == (1, rows)
    padded = md.QuantizedActivation(data, scale, md.ScaleLayout.COL_MAJOR_STRIDED, qa.fmt).dequantize()
    expected = torch.zeros(rows, cols)
    expected[:m, :k] = qa.dequantize()
    assert torch.equal(padded, expected)

    weight = random_weight(256, k, gen)
    lin = md.kernels.BlockScaledLinear("proj", weight)
    w_data, w_scale = _dense_weight(lin)
    assert w_data.shape == (256, cols) and w_scale.shape == (2, cols // 128)
    w_expected = torch.zeros(256, cols)
    w_expected[:, :k] = weight.dequantize_plain()
    assert torch.equal(md.QuantizedWeight(w_data, w_scale, weight.fmt).dequantize_plain(), w_expected)
    assert _dense_weight(lin)[0] is w_data  # cached


def test_wrongly_strided_scales_are_passed_through_untouched(gen):
    qa = md.quantize_groups(random_tokens(3, 256, gen), scale_layout=md.ScaleLayout.ROW_MAJOR)
    data, scale = _padded_input(qa)
    assert data is qa.data and scale is qa.scale
