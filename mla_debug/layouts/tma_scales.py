"""DeepGEMM's scale buffers: column-major TMA-aligned fp32 scales and four ue8m0 scales packed per int32.

DeepGEMM's TMA loads want the scale of an (MN, K) operand MN-major (stride 1 along MN) with the K stride
rounded up to 16 bytes: ``get_tma_aligned_size(mn, element_size) = align(mn, 16 // element_size)`` (DeepGEMM
``csrc/utils/layout.hpp``, vendored as ``vllm/utils/deep_gemm.py`` ``get_tma_aligned_size``). Two forms:

- fp32 (Hopper, and Blackwell without ue8m0): an (M, G) tensor with strides (1, align(M, 4)) - what vLLM
  0.33's ``per_token_group_quant_fp8(column_major_scales=True, tma_aligned_scales=True)`` allocates
  (``layers/quantization/utils/fp8_utils.py``) and DeepGEMM's ``get_mn_major_tma_aligned_tensor`` makes of
  any other layout (by strides). `tma_aligned_column_major` writes it.
- packed ue8m0 (Blackwell with ue8m0 scales; vLLM's ``DeepGemmQuantScaleFMT.UE8M0``): the exponent byte of
  each power-of-two scale (``float bits >> 23``), four consecutive K groups per little-endian int32 (group
  4j + b in byte b of int j, K padded to a multiple of 4 with zero bytes), as an (MN, ceil(G/4)) int32
  tensor with strides (1, align(MN, 4)) - DeepGEMM's ``get_mn_major_tma_aligned_packed_ue8m0_tensor``
  (``csrc/jit_kernels/impls/smxx_layout.hpp``; its torch version is copied into SGLang 0.5.23
  ``fp8_utils.py`` ``_get_mn_major_tma_aligned_packed_ue8m0_tensor_torch_impl``). `pack_ue8m0` writes it,
  `unpack_ue8m0` reads it back as SGLang's ``_inverse_transform_scale_ue8m0_impl`` does (``byte << 23``).

Taking only the exponent byte is a truncation: a scale that is not a power of two is read as the power of
two below it. Producers avoid that by rounding scales up to powers of two first (ue8m0 quantization).
"""

from __future__ import annotations

import torch

from .._checks import describe, require_ndim, require_tensor

TMA_ALIGNMENT_BYTES = 16
UE8M0_PER_INT32 = 4


def align(value: int, multiple: int) -> int:
    """`value` rounded up to a multiple of `multiple`."""
    return -(-value // multiple) * multiple


def tma_aligned_size(size: int, element_size: int) -> int:
    """DeepGEMM's ``get_tma_aligned_size``: `size` elements rounded up to whole 16-byte units."""
    return align(size, TMA_ALIGNMENT_BYTES // element_size)


def _require_scale(name: str, scale: torch.Tensor) -> None:
    require_tensor(name, scale)
    require_ndim(name, scale, 2)
    if scale.dtype != torch.float32:
        raise TypeError(f"{name}: {describe(scale)} must be float32")


def tma_aligned_column_major(logical: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """A fresh (M, G) fp32 buffer holding `logical`'s values with strides (1, align(M, 4)); the padding rows of
    its (G, align(M, 4)) storage are zero."""
    _require_scale(name, logical)
    m, groups = logical.shape
    storage = torch.zeros((groups, tma_aligned_size(m, 4)), dtype=torch.float32, device=logical.device)
    buffer = storage[:, :m].t()
    buffer.copy_(logical)
    return buffer


def is_tma_aligned_column_major(buffer: torch.Tensor) -> bool:
    """Whether an (MN, K') tensor is MN-major with DeepGEMM's TMA-aligned K stride (size-1 dims aside)."""
    mn, k = buffer.shape
    aligned = tma_aligned_size(mn, buffer.element_size())
    return (mn == 1 or buffer.stride(0) == 1) and (k == 1 or buffer.stride(1) == aligned)


def ue8m0_bytes(scale: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """The ue8m0 byte DeepGEMM keeps of each fp32 scale: ``(bits >> 23)`` cast to uint8 - the exponent field
    of a positive scale (a NaN or Inf scale keeps its all-ones exponent, as on the GPU)."""
    _require_scale(name, scale)
    return (scale.contiguous().view(torch.int32) >> 23).to(torch.uint8)


def pack_ue8m0(logical: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """(MN, G) fp32 scales -> DeepGEMM's packed (MN, ceil(G/4)) int32 tensor, MN-major and TMA-aligned."""
    exponents = ue8m0_bytes(logical, name)
    mn, groups = exponents.shape
    packed_k = align(groups, UE8M0_PER_INT32) // UE8M0_PER_INT32
    row_major = torch.zeros((mn, packed_k * UE8M0_PER_INT32), dtype=torch.uint8, device=logical.device)
    row_major[:, :groups] = exponents
    # Little-endian: the four bytes of int j of a row are its groups 4j .. 4j+3, lowest group lowest byte.
    as_int = row_major.view(torch.int32)
    storage = torch.zeros((packed_k, tma_aligned_size(mn, 4)), dtype=torch.int32, device=logical.device)
    packed = storage[:, :mn].t()
    packed.copy_(as_int)
    return packed


def unpack_ue8m0(packed: torch.Tensor, groups: int, name: str = "packed scale") -> torch.Tensor:
    """DeepGEMM's packed int32 scales -> the (MN, `groups`) fp32 powers of two they hold (read by strides)."""
    require_tensor(name, packed)
    require_ndim(name, packed, 2)
    if packed.dtype != torch.int32:
        raise TypeError(f"{name}: {describe(packed)} must be int32 (four ue8m0 bytes per element)")
    mn, packed_k = packed.shape
    if align(groups, UE8M0_PER_INT32) // UE8M0_PER_INT32 != packed_k:
        raise ValueError(
            f"{name}: {describe(packed)} holds {packed_k} int32 per row, but {groups} groups pack into "
            f"{align(groups, UE8M0_PER_INT32) // UE8M0_PER_INT32}"
        )
    # A fresh row-major copy (`.contiguous()` keeps the odd strides of size-1 dimensions, which a byte view refuses).
    rows = torch.empty((mn, packed_k), dtype=torch.int32, device=packed.device).copy_(packed)
    exponents = rows.view(torch.uint8).view(mn, packed_k * UE8M0_PER_INT32)[:, :groups]
    return (exponents.to(torch.int32) << 23).view(torch.float32)
