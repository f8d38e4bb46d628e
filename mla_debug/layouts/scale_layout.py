"""The three memory presentations of one logical (M, G) activation scale (docs/semantics.md §5).

| layout            | shape  | strides | byte of (m, g) |
| ROW_MAJOR         | (M, G) | (G, 1)  | m*G + g        |
| COL_MAJOR         | (M, G) | (G, 1)  | g*M + m        |  <- same shape AND strides as ROW_MAJOR
| COL_MAJOR_STRIDED | (M, G) | (1, M)  | g*M + m        |

ROW_MAJOR and COL_MAJOR ("view") buffers are indistinguishable by shape and strides, so a consumer
that reads one as the other raises nothing. Kernels that take raw pointers (aiter CK/ASM) read
``M*G`` consecutive floats from the data pointer in their own order, whatever the tensor claims;
`read_scale` reproduces exactly that.
"""

from __future__ import annotations

from enum import Enum

import torch

from .._checks import describe, is_dense, require_ndim, require_tensor


class ScaleLayout(str, Enum):
    """How an (M, G) fp32 activation scale sits in memory."""

    ROW_MAJOR = "row_major"
    COL_MAJOR = "col_major"
    COL_MAJOR_STRIDED = "col_major_strided"

    def __str__(self) -> str:
        return self.name

    @property
    def byte_order(self) -> str:
        """'row' (m*G + g) or 'col' (g*M + m): what a raw-pointer reader sees."""
        return "row" if self is ScaleLayout.ROW_MAJOR else "col"

    def strides(self, m: int, g: int) -> tuple[int, int]:
        """The strides a tensor presented in this layout carries."""
        return (1, m) if self is ScaleLayout.COL_MAJOR_STRIDED else (g, 1)

    @classmethod
    def parse(cls, spec: str | ScaleLayout) -> ScaleLayout:
        if isinstance(spec, ScaleLayout):
            return spec
        key = str(spec).strip().lower().replace("-", "_")
        for layout in cls:
            if key in (layout.value, layout.name.lower()):
                return layout
        raise ValueError(f"unknown scale layout {spec!r}; valid: {', '.join(layout.name for layout in cls)}")


def present_scale(logical: torch.Tensor, layout: ScaleLayout | str, name: str = "scale") -> torch.Tensor:
    """Write a logical (M, G) scale into a fresh buffer in `layout`, as that producer would."""
    require_tensor(name, logical)
    require_ndim(name, logical, 2)
    layout = ScaleLayout.parse(layout)
    m, g = logical.shape
    # Always a fresh allocation with the layout's exact strides: `.contiguous()` returns its input
    # unchanged when M == 1 or G == 1, which used to alias `logical` and leave size-1 strides off.
    buffer = torch.empty_strided((m, g), layout.strides(m, g), dtype=logical.dtype, device=logical.device)
    if layout is ScaleLayout.COL_MAJOR:
        # The transpose's bytes in a buffer that claims the plain (M, G) shape and strides.
        buffer.view(g, m).copy_(logical.t())
    else:
        buffer.copy_(logical)
    return buffer


def scale_memory(buffer: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """The buffer's elements in memory order (1-D view), as a raw-pointer kernel reads them."""
    require_tensor(name, buffer)
    if not is_dense(buffer):
        raise ValueError(
            f"{name}: {describe(buffer)} with strides {tuple(buffer.stride())} does not cover one gap-free "
            "span of memory; a kernel reading it through a raw pointer would read unrelated bytes"
        )
    return buffer.as_strided((buffer.numel(),), (1,))


def read_scale(buffer: torch.Tensor, layout: ScaleLayout | str, name: str = "scale") -> torch.Tensor:
    """The logical (M, G) scale a consumer expecting `layout` reads from `buffer`'s bytes.

    The buffer's own strides are ignored, as CK and ASM kernels ignore them: only its shape (M, G)
    and its bytes in memory order matter.
    """
    require_tensor(name, buffer)
    require_ndim(name, buffer, 2)
    layout = ScaleLayout.parse(layout)
    m, g = buffer.shape
    memory = scale_memory(buffer, name)
    if layout is ScaleLayout.ROW_MAJOR:
        return memory.view(m, g)
    return memory.view(g, m).t()


def convert_scale(
    buffer: torch.Tensor, src: ScaleLayout | str, dst: ScaleLayout | str, name: str = "scale"
) -> torch.Tensor:
    """Byte-exact conversion of a buffer written in `src` into a fresh buffer in `dst`."""
    return present_scale(read_scale(buffer, src, name), dst, name)


def scale_as_read(
    logical: torch.Tensor, written: ScaleLayout | str, read_as: ScaleLayout | str, name: str = "scale"
) -> torch.Tensor:
    """What a consumer expecting `read_as` gets from bytes a producer wrote in `written`.

    Equal to `logical` whenever both layouts share a byte order, and also when M == 1 or G == 1
    (the bytes are then identical) - which is why single-token decode hides the bug.
    """
    return read_scale(present_scale(logical, written, name), read_as, name).clone()


def same_bytes(written: ScaleLayout | str, read_as: ScaleLayout | str, m: int, g: int) -> bool:
    """Whether a reader expecting `read_as` gets the right values from bytes written in `written`."""
    written, read_as = ScaleLayout.parse(written), ScaleLayout.parse(read_as)
    return written.byte_order == read_as.byte_order or m == 1 or g == 1
