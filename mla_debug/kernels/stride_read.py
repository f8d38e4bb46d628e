"""What a GEMM that reads its activation scale BY STRIDES sees, as opposed to a raw-pointer reader.

aiter's Triton GEMMs (``gemm_a8w8_blockscale``, ``gemm_a8w8_blockscale_preshuffle`` called with
``is_x_scale_tranposed=False``), vLLM's ``w8a8_triton_block_scaled_mm`` and DeepGEMM's host-side scale
transform all index ``x_scale`` through the strides the tensor carries. Such a reader gets the tensor's
own values at (m, g) - right for a ROW_MAJOR buffer and for any column-major one whose strides say so
((1, M), or DeepGEMM's TMA-aligned (1, align(M, 4))) - and wrong only for a COL_MAJOR "view" buffer,
whose transposed bytes sit behind row-major strides (what aiter's ``transpose_scale=True`` producers
write). The kernels record the order they read in, so a producer's layout is an effective violation
exactly when it changes the values read.
"""

from __future__ import annotations

import torch

from ..layouts import ScaleLayout


def layout_read_by_strides(scale: torch.Tensor) -> ScaleLayout:
    """The presentation a stride-following reader takes `scale` (M, G) for: column-major when its strides
    are column-major (stride 1 along M, at least M along G - a (1, M)-strided or TMA-aligned buffer, also
    when M or G is 1), row-major otherwise - a COL_MAJOR "view" buffer included, whose strides claim
    row-major. A 1 x 1 scale has no order; it is taken as row-major."""
    m, groups = scale.shape
    if (m, groups) != (1, 1) and scale.stride(0) == 1 and scale.stride(1) >= m:
        return ScaleLayout.COL_MAJOR_STRIDED
    return ScaleLayout.ROW_MAJOR


def values_read_by_strides(scale: torch.Tensor) -> torch.Tensor:
    """The fp32 (M, G) values a stride-following reader gets: the tensor's own values, whatever its bytes."""
    return scale.float()
