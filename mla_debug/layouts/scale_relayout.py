"""SGLang's consumer-side re-layout of a pre-quantized activation scale: ``as_strided(scale, shape, (1, M))``.

SGLang 0.5.23 ``srt/layers/quantization/fp8_utils.py`` ``view_aiter_fused_rms_transposed_fp8_scale``
(called by ``aiter_w8a8_block_fp8_linear`` on its Triton branch for a pre-quantized input) turns a
``transpose_scale=True`` scale - column-major bytes behind row-major (M, G) strides - into a logical (M, G)
view by swapping the strides, with no copy. The view reads ``memory[g * M + m]`` from the buffer's first
byte, whatever strides the buffer carried: right for bytes written column-major (COL_MAJOR, or
COL_MAJOR_STRIDED, on which the swap changes nothing), silently wrong for a ROW_MAJOR buffer when M > 1
(for M == 1 the two byte orders coincide, which is why SGLang's producers keep ``transpose_scale=False``
there). `relay_column_major` is that view; `values_relaid` the fp32 values a reader of it gets.
"""

from __future__ import annotations

import torch

from .._checks import describe, is_dense, require_ndim, require_tensor


def relay_column_major(scale: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """``torch.as_strided(scale, scale.shape, (1, M))`` of a 2-D (M, G) scale, as SGLang's consumer makes it.

    The buffer must cover one gap-free span of memory: the view reads M * G consecutive elements from
    its first one, and a strided view of a larger tensor would hand it unrelated bytes.
    """
    require_tensor(name, scale)
    require_ndim(name, scale, 2)
    if not is_dense(scale):
        raise ValueError(
            f"{name}: {describe(scale)} with strides {tuple(scale.stride())} does not cover one gap-free span of "
            "memory; as_strided(scale, shape, (1, M)) would read bytes outside it"
        )
    # Literally SGLang's call: the view starts at the buffer's own first element.
    return torch.as_strided(scale, scale.shape, (1, scale.shape[0]))


def values_relaid(scale: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """The fp32 (M, G) values a reader of SGLang's re-laid view gets from `scale`'s bytes."""
    return relay_column_major(scale, name).float()
