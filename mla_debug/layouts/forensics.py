"""Layout forensics: given bytes found in memory and the values they should hold, say how they got there.

`identify_weight_layout` answers "how many shuffles of which layout turn the reference weight into what
the kernel holds?"; `is_vnni_packing` whether it holds the reference VNNI-packed (vLLM's CPU kernels,
`layouts.vnni`); `identify_scale_layout` answers "in which presentation(s) was this scale written?".
Both compare bytes only, never values, so they work on any dtype.

`compare_tensor` / `compare_tensors` apply them to saved tensors (a dump against a checkpoint, as
``mla-debug layouts`` does) and return typed verdicts (`TensorVerdict`, `TensorComparison`, with a
pandas DataFrame for notebooks); `shuffle_fit` says whether a shuffle tile fits a tensor at all.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

import torch

from .._checks import describe, is_dense, require_tensor
from .scale_layout import ScaleLayout, present_scale, scale_memory
from .vnni import can_vnni_pack, vnni_pack
from .weight_shuffle import LAYOUTS, ShuffleLayout, shuffle_period, shuffle_weight


@dataclass(frozen=True)
class WeightLayoutMatch:
    """`shuffles` applications of `layout` turn the reference into the observed bytes.

    Counts are only defined modulo `period`: when the period is 2 (a 256-byte row), 0 and 2 shuffles
    are indistinguishable, so `shuffles` is the smallest count that matches.
    """

    layout: ShuffleLayout | None
    shuffles: int
    period: int

    def __str__(self) -> str:
        if self.shuffles == 0:
            return "plain (bytes equal the reference)"
        times = "once" if self.shuffles == 1 else f"{self.shuffles} times"
        return f"shuffled {times} with {self.layout} (period {self.period})"


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    # reshape(-1), not contiguous(): torch leaves e.g. a (N, 1) tensor with strides (1, N) as it is,
    # then refuses to reinterpret it as bytes.
    return (
        a.shape == b.shape
        and a.element_size() == b.element_size()
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


# Shuffle counts tried by default: the serving bugs seen shuffle once or twice (kernel, model, both).
MAX_SHUFFLES = 4


def identify_weight_layout(
    observed: torch.Tensor,
    reference: torch.Tensor,
    layouts: tuple[ShuffleLayout, ...] = LAYOUTS,
    max_shuffles: int = MAX_SHUFFLES,
) -> WeightLayoutMatch | None:
    """How many shuffles of which layout turn `reference` into `observed`, or None if none do.

    >>> identify_weight_layout(md.shuffle_weight(md.shuffle_weight(w)), w)
    WeightLayoutMatch(layout=(16, 16), shuffles=2, period=...)
    """
    require_tensor("observed", observed)
    require_tensor("reference", reference)
    if observed.shape != reference.shape or observed.element_size() != reference.element_size():
        raise ValueError(
            f"identify_weight_layout: observed {describe(observed)} and reference {describe(reference)} "
            "must have the same shape and element size"
        )
    k, size = reference.shape[-1], reference.element_size()
    if _same_bytes(observed, reference):
        return WeightLayoutMatch(layout=None, shuffles=0, period=1)
    n = reference.shape[-2] if reference.dim() >= 2 else 0
    for layout in layouts:
        if reference.dim() < 2 or n % layout[0] or k % (2 * layout[1]):
            continue
        period = shuffle_period(k, size, layout)
        current = reference
        for count in range(1, min(max_shuffles, period - 1) + 1):
            current = shuffle_weight(current, layout)
            if _same_bytes(current, observed):
                return WeightLayoutMatch(layout=tuple(layout), shuffles=count, period=period)
    return None


def is_vnni_packing(observed: torch.Tensor, reference: torch.Tensor) -> bool:
    """Whether `observed` holds `reference`'s bytes VNNI-packed (and differs from them: a weight whose
    packing changes nothing - every band one row - is plain, not packed)."""
    require_tensor("observed", observed)
    require_tensor("reference", reference)
    if observed.shape != reference.shape or observed.element_size() != reference.element_size():
        return False
    if not can_vnni_pack(tuple(reference.shape), reference.dtype) or _same_bytes(observed, reference):
        return False
    return _same_bytes(vnni_pack(reference.contiguous(), name="reference"), observed)


def identify_scale_layout(buffer: torch.Tensor, logical_scale: torch.Tensor) -> tuple[ScaleLayout, ...]:
    """The presentations whose bytes AND strides match `buffer` for the values `logical_scale`.

    Empty when none matches (the buffer holds other values). Several match when the presentations
    coincide: M == 1 or G == 1 (identical bytes), or size-1 dimensions that make strides ambiguous.
    """
    require_tensor("buffer", buffer)
    require_tensor("logical_scale", logical_scale)
    if buffer.shape != logical_scale.shape or buffer.dim() != 2:
        raise ValueError(
            f"identify_scale_layout: buffer {describe(buffer)} and logical_scale {describe(logical_scale)} "
            "must both be (M, G)"
        )
    if not is_dense(buffer):
        return ()
    m, g = buffer.shape
    memory = scale_memory(buffer, "buffer")
    matches = []
    for layout in ScaleLayout:
        candidate = present_scale(logical_scale.to(buffer.dtype), layout)
        strides_agree = all(
            size == 1 or actual == expected
            for size, actual, expected in zip(buffer.shape, buffer.stride(), layout.strides(m, g))
        )
        if strides_agree and _same_bytes(memory, scale_memory(candidate)):
            matches.append(layout)
    return tuple(matches)


# -- verdicts on saved tensors ---------------------------------------------------------------------
#
# The decisions `mla-debug layouts` prints, as data: how one tensor's bytes relate to a reference's
# (plain, shuffled k times with which tile, written in which scale presentation, unrelated and what was
# tried), and the same for every tensor of two dicts. Words are made by the caller (cli/, viz/).


class VerdictKind(str, Enum):
    """How an observed tensor's bytes relate to its reference's."""

    PLAIN = "plain"  # the bytes are the reference's
    SHUFFLED = "shuffled"  # the reference shuffled `match.shuffles` times with `match.layout`
    VNNI_PACKED = "vnni_packed"  # the reference VNNI-packed (vLLM's CPU kernels, `layouts.vnni`)
    UNRELATED = "unrelated"  # neither plain nor any shuffle tried (`tried`)
    DIFFERENT_VALUE = "different_value"  # a 0-D tensor whose bytes differ
    SHAPE_DIFFERS = "shape_differs"
    DTYPE_DIFFERS = "dtype_differs"  # element sizes differ: the bytes cannot be compared
    SCALE_WRITTEN = "scale_written"  # an activation scale in the presentation(s) `scale_layouts`
    SCALE_TRANSPOSED = "scale_transposed"  # an activation scale saved as its (G, M) transpose's memory
    SCALE_UNRELATED = "scale_unrelated"  # an activation scale in no presentation of the reference's values


@dataclass(frozen=True)
class ShuffleAttempt:
    """Shuffles 1..`max_shuffles` with `layout` were compared with the observed bytes (none matched)."""

    layout: ShuffleLayout
    max_shuffles: int


@dataclass(frozen=True)
class TensorVerdict:
    """How the bytes of the observed tensor `name` relate to the reference's.

    `match` is set for PLAIN and SHUFFLED (for a 0-D tensor's PLAIN too); `same_bytes_as` lists the
    other shuffle counts that give these very bytes (a 256-byte row makes the (16, 16) shuffle an
    involution, so plain bytes are also 2 shuffles). `scale_layouts` holds the presentations found for
    an activation scale (several when M == 1 or G == 1 make them coincide); `tried` the shuffles compared
    when nothing matched. Bytes are compared whenever element sizes agree, even if the dtypes differ
    (`dtypes_differ`).
    """

    name: str
    kind: VerdictKind
    observed_shape: tuple[int, ...]
    reference_shape: tuple[int, ...]
    observed_dtype: torch.dtype
    reference_dtype: torch.dtype
    activation_scale: bool = False
    match: WeightLayoutMatch | None = None
    same_bytes_as: tuple[WeightLayoutMatch, ...] = ()
    scale_layouts: tuple[ScaleLayout, ...] = ()
    tried: tuple[ShuffleAttempt, ...] = ()

    @property
    def dtypes_differ(self) -> bool:
        return self.observed_dtype != self.reference_dtype

    @property
    def shuffles(self) -> int | None:
        """Shuffles found (0 for plain bytes), None when the bytes are not the reference's in any layout."""
        return None if self.match is None else self.match.shuffles

    def as_row(self) -> dict:
        """One flat row of plain values (`ROW_COLUMNS`; shapes and layouts as tuples, dtypes and enums
        as their names)."""
        return {
            "tensor": self.name,
            "verdict": self.kind.value,
            "observed_shape": self.observed_shape,
            "reference_shape": self.reference_shape,
            "observed_dtype": str(self.observed_dtype).removeprefix("torch."),
            "reference_dtype": str(self.reference_dtype).removeprefix("torch."),
            "activation_scale": self.activation_scale,
            "shuffles": self.shuffles,
            "shuffle_layout": None if self.match is None else self.match.layout,
            "period": None if self.match is None else self.match.period,
            "same_bytes_as_shuffles": tuple(m.shuffles for m in self.same_bytes_as),
            "scale_layouts": tuple(layout.name for layout in self.scale_layouts),
            "tried": tuple((attempt.layout, attempt.max_shuffles) for attempt in self.tried),
        }


ROW_COLUMNS = (
    "tensor",
    "verdict",
    "observed_shape",
    "reference_shape",
    "observed_dtype",
    "reference_dtype",
    "activation_scale",
    "shuffles",
    "shuffle_layout",
    "period",
    "same_bytes_as_shuffles",
    "scale_layouts",
    "tried",
)


def is_activation_scale(name: str, observed: torch.Tensor, reference: torch.Tensor) -> bool:
    """Whether the pair is an activation scale: named ``*_scale`` or ``*.scale``, both 2-D float32.

    Its reference holds the logical (M, G) values and the observed tensor a presentation of them; weight
    scales are named ``*.weight_scale_inv`` and are compared as plain bytes.
    """
    return (
        name.endswith(("_scale", ".scale"))
        and observed.dim() == 2
        and reference.dim() == 2
        and observed.dtype == torch.float32
        and reference.dtype == torch.float32
    )


@dataclass(frozen=True)
class ShuffleFit:
    """Whether a shuffle tile (IN, U) fits a tensor (..., N, K): N % IN == 0, K % (2 U) == 0 and 1, 2
    or 4-byte elements (what `shuffle_weight` requires). N and K are None below two dimensions."""

    layout: ShuffleLayout
    ndim: int
    n: int | None
    k: int | None
    element_size: int

    @property
    def n_fits(self) -> bool:
        return self.n is not None and self.n % self.layout[0] == 0

    @property
    def k_fits(self) -> bool:
        return self.k is not None and self.k % (2 * self.layout[1]) == 0

    @property
    def element_size_fits(self) -> bool:
        return self.element_size in (1, 2, 4)

    @property
    def fits(self) -> bool:
        return self.ndim >= 2 and self.n_fits and self.k_fits and self.element_size_fits


def shuffle_fit(tensor: torch.Tensor, layout: ShuffleLayout = (16, 16)) -> ShuffleFit:
    """Whether `layout`'s shuffle applies to `tensor`, and which of its rules hold."""
    require_tensor("tensor", tensor)
    wide = tensor.dim() >= 2
    return ShuffleFit(
        layout=tuple(layout),
        ndim=tensor.dim(),
        n=tensor.shape[-2] if wide else None,
        k=tensor.shape[-1] if wide else None,
        element_size=tensor.element_size(),
    )


def shuffle_layouts_for(
    tensor: torch.Tensor, layouts: tuple[ShuffleLayout, ...] = LAYOUTS
) -> tuple[ShuffleLayout, ...]:
    """The shuffle layouts (IN, U) whose tiles fit `tensor` (..., N, K): N % IN == 0 and K % (2 U) == 0."""
    if tensor.dim() < 2:
        return ()
    n, k = tensor.shape[-2], tensor.shape[-1]
    return tuple(tuple(layout) for layout in layouts if not n % layout[0] and not k % (2 * layout[1]))


def compare_tensor(
    name: str, observed: torch.Tensor, reference: torch.Tensor, max_shuffles: int = MAX_SHUFFLES
) -> TensorVerdict:
    """How `observed`'s bytes relate to `reference`'s (see `VerdictKind`), as a record.

    >>> compare_tensor("o_proj.weight", md.shuffle_weight(md.shuffle_weight(w)), w).shuffles
    2
    """
    require_tensor(f"{name} (observed)", observed)
    require_tensor(f"{name} (reference)", reference)
    scale = is_activation_scale(name, observed, reference)
    record = functools.partial(
        TensorVerdict,
        name,
        observed_shape=tuple(observed.shape),
        reference_shape=tuple(reference.shape),
        observed_dtype=observed.dtype,
        reference_dtype=reference.dtype,
        activation_scale=scale,
    )
    if observed.shape != reference.shape:
        # A COL_MAJOR_STRIDED buffer has no contiguous (M, G) form; its memory saves as the (G, M) transpose.
        if scale and tuple(observed.shape) == tuple(reference.shape)[::-1]:
            found = identify_scale_layout(observed.t(), reference)
            if found:
                return record(kind=VerdictKind.SCALE_TRANSPOSED, scale_layouts=found)
        return record(kind=VerdictKind.SHAPE_DIFFERS)
    if observed.element_size() != reference.element_size():
        return record(kind=VerdictKind.DTYPE_DIFFERS)
    if scale:
        found = identify_scale_layout(observed, reference)
        return record(kind=VerdictKind.SCALE_WRITTEN if found else VerdictKind.SCALE_UNRELATED, scale_layouts=found)
    if observed.dim() == 0:
        if _same_bytes(observed.reshape(1), reference.reshape(1)):
            return record(kind=VerdictKind.PLAIN, match=WeightLayoutMatch(layout=None, shuffles=0, period=1))
        return record(kind=VerdictKind.DIFFERENT_VALUE)
    match = identify_weight_layout(observed, reference, max_shuffles=max_shuffles)
    fitting = shuffle_layouts_for(observed)
    k, size = observed.shape[-1], observed.element_size()
    if match is None and is_vnni_packing(observed, reference):
        return record(kind=VerdictKind.VNNI_PACKED)
    if match is None:
        # identify_weight_layout stops one short of the period: that many shuffles give the bytes back.
        tried = tuple(
            ShuffleAttempt(layout, min(max_shuffles, shuffle_period(k, size, layout) - 1)) for layout in fitting
        )
        return record(kind=VerdictKind.UNRELATED, tried=tried)
    if match.shuffles:
        return record(kind=VerdictKind.SHUFFLED, match=match)
    aliases = ()
    if (16, 16) in fitting and shuffle_period(k, size) == 2:
        # A 256-byte row: the (16, 16) shuffle is an involution, so two shuffles give these bytes too.
        aliases = (WeightLayoutMatch(layout=(16, 16), shuffles=2, period=2),)
    return record(kind=VerdictKind.PLAIN, match=match, same_bytes_as=aliases)


@dataclass(frozen=True)
class TensorComparison:
    """Every tensor of two dicts compared by name: one `TensorVerdict` per name both hold (in the
    reference's order, or the order asked), and the names only one side holds."""

    verdicts: tuple[TensorVerdict, ...]
    only_in_observed: tuple[str, ...] = ()
    only_in_reference: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> TensorVerdict:
        for verdict in self.verdicts:
            if verdict.name == name:
                return verdict
        raise KeyError(f"no verdict for tensor {name!r}; compared: {', '.join(v.name for v in self.verdicts)}")

    def to_frame(self):
        """The verdicts as a pandas DataFrame, one row per tensor (`TensorVerdict.as_row`'s columns)."""
        import pandas as pd  # here, not at module level: the layouts layer works without pandas

        return pd.DataFrame([verdict.as_row() for verdict in self.verdicts], columns=list(ROW_COLUMNS))


def compare_tensors(
    observed: Mapping[str, torch.Tensor],
    reference: Mapping[str, torch.Tensor],
    names: Sequence[str] | None = None,
    max_shuffles: int = MAX_SHUFFLES,
) -> TensorComparison:
    """`compare_tensor` for every name both dicts hold, in `reference`'s order; with `names`, those
    names in that order (each must be in both, else a LookupError naming the side that lacks it)."""
    if names is None:
        chosen = [name for name in reference if name in observed]
    else:
        for side, tensors in (("observed", observed), ("reference", reference)):
            missing = [name for name in names if name not in tensors]
            if missing:
                raise LookupError(
                    f"compare_tensors: {', '.join(missing)} not in {side}; it has {', '.join(tensors) or 'nothing'}"
                )
        chosen = list(dict.fromkeys(names))
    verdicts = tuple(compare_tensor(name, observed[name], reference[name], max_shuffles) for name in chosen)
    return TensorComparison(
        verdicts=verdicts,
        only_in_observed=tuple(name for name in observed if name not in reference),
        only_in_reference=tuple(name for name in reference if name not in observed),
    )
