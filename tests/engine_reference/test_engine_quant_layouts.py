"""A flavor names an engine function, and the function picks its kernel by the scale order it writes.

SGLang 0.5.23's ``per_token_group_quant_fp8`` off CUDA (``_per_token_group_quant_8bit_raw``,
sglang/kernels/ops/quantization/fp8_kernel.py) launches ``_per_token_group_quant_8bit`` (``y * (1 / y_s)``) for
row-major scales and ``_per_token_group_quant_8bit_colmajor`` (``y / y_s``) for column-major ones: on groups
whose quotients sit near a rounding tie the two write different fp8 bytes. Asked for either SGLang flavor,
`quantize_groups` runs the kernel the engine runs for the layout it writes - checked here against both
released kernels under Triton's CPU interpreter, bytes, scale bits and the strides the engine gives its scale.
"""

from __future__ import annotations

import pytest
import torch
from engine_checks import assert_byte_exact, run_engine
from engine_inputs import edge_groups
from engine_quantizers import BY_ID, FN, FNUZ

import mla_debug as md

pytestmark = pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")
LAYOUTS = {"sglang-triton": md.ScaleLayout.ROW_MAJOR, "sglang-triton-colmajor": md.ScaleLayout.COL_MAJOR_STRIDED}


@pytest.mark.parametrize("fmt", [FN, FNUZ], ids=["e4m3fn", "e4m3fnuz"])
def test_either_sglang_flavor_runs_the_engines_kernel_for_the_scale_order_it_writes(fmt):
    x = edge_groups(torch.float32)  # holds groups on rounding ties, where the two kernels disagree
    engine = {kernel: run_engine(BY_ID[kernel], x, fmt, False, keep_layout=True) for kernel in LAYOUTS}
    row_q, col_q = (engine[kernel][0].view(torch.uint8) for kernel in LAYOUTS)
    assert not torch.equal(row_q, col_q), "the input no longer tells the two kernels apart"
    for kernel, layout in LAYOUTS.items():
        q, scale = engine[kernel]
        for asked in LAYOUTS:
            mine = md.quantize_groups(x, fmt=fmt, flavor=asked, scale_layout=layout)
            assert mine.flavor == kernel
            assert mine.scale.stride() == scale.stride(), f"{kernel} lays its scale out as {scale.stride()}"
            assert_byte_exact(mine, q, scale.contiguous(), f"flavor {asked} with {layout.name} scales")


def test_a_flavor_of_one_arithmetic_ignores_the_scale_order():
    x = edge_groups(torch.float32)
    for flavor in ("vllm-triton", "aiter-hip", "flashinfer-sm90"):
        row = md.quantize_groups(x, flavor=flavor, scale_layout="row_major")
        col = md.quantize_groups(x, flavor=flavor, scale_layout="col_major_strided")
        assert row.flavor == col.flavor == flavor
        assert torch.equal(row.data.view(torch.uint8), col.data.view(torch.uint8))
