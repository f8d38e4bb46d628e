"""Layout-forensics verdicts in words: the lines `mla-debug layouts` prints, for notebooks too.

The decisions are `layouts.forensics`' (`TensorVerdict`, `ShuffleFit`); this module only says them.
"""

from __future__ import annotations

from ..layouts.forensics import ShuffleFit, TensorVerdict, VerdictKind


def verdict_text(verdict: TensorVerdict) -> str:
    """How the observed tensor's bytes relate to the reference's, in one line.

    >>> verdict_text(md.compare_tensor("o_proj.weight", shuffled_twice, w))
    'shuffled 2 times with (16, 16) (period 11)'
    """
    kind = verdict.kind
    if kind is VerdictKind.SHAPE_DIFFERS:
        return f"shape differs: observed {verdict.observed_shape}, reference {verdict.reference_shape}"
    if kind is VerdictKind.SCALE_TRANSPOSED:
        return f"activation scale stored as its (G, M) transpose: {_presentations(verdict)} memory"
    if kind is VerdictKind.DTYPE_DIFFERS:
        return (
            f"dtype differs: observed {verdict.observed_dtype}, reference {verdict.reference_dtype} "
            "(bytes not comparable)"
        )
    return _bytes_text(verdict) + (
        f" [bytes compared: {verdict.observed_dtype} vs {verdict.reference_dtype}]" if verdict.dtypes_differ else ""
    )


def _presentations(verdict: TensorVerdict) -> str:
    return " = ".join(map(str, verdict.scale_layouts))


def _bytes_text(verdict: TensorVerdict) -> str:
    """The verdict on bytes of equal size (the dtype note is the caller's)."""
    kind = verdict.kind
    if kind is VerdictKind.SCALE_UNRELATED:
        return "activation scale: unrelated bytes (no presentation of the reference's values)"
    if kind is VerdictKind.SCALE_WRITTEN:
        if len(verdict.scale_layouts) > 1:
            return f"activation scale: {_presentations(verdict)} (M == 1 or G == 1: the presentations coincide)"
        (layout,) = verdict.scale_layouts
        if layout.name == "COL_MAJOR":
            return "activation scale written COL_MAJOR (column-major bytes under ROW_MAJOR's shape and strides)"
        return f"activation scale written {layout}"
    if kind is VerdictKind.DIFFERENT_VALUE:
        return "different value"
    if kind is VerdictKind.VNNI_PACKED:
        return "VNNI-packed (the reference's bytes in bands of 32 rows, K in pairs, as vLLM's CPU kernels pack them)"
    if kind is VerdictKind.UNRELATED:
        if not verdict.tried:
            return f"unrelated bytes (not equal; shape {verdict.observed_shape} admits no shuffle to try)"
        tried = ", ".join(
            f"{'1 shuffle' if attempt.max_shuffles == 1 else f'1-{attempt.max_shuffles} shuffles'} with {attempt.layout}"
            for attempt in verdict.tried
        )
        return f"unrelated bytes (neither plain nor {tried})"
    assert verdict.match is not None, f"{verdict.name}: a {kind.value} verdict carries its match"
    text = str(verdict.match)
    for alias in verdict.same_bytes_as:
        text += f"; {alias.shuffles} shuffles with {alias.layout} look the same here (period {alias.period})"
    return text


def shuffle_fit_text(fit: ShuffleFit) -> str:
    """'yes', or 'no' with the rules the tensor breaks (its dimensions, N, K, element size)."""
    if fit.ndim < 2:
        return f"no ({fit.ndim}-D)"
    problems = [] if fit.n_fits else [f"N={fit.n} is not a multiple of {fit.layout[0]}"]
    problems += [] if fit.k_fits else [f"K={fit.k} is not a multiple of {2 * fit.layout[1]}"]
    problems += [] if fit.element_size_fits else [f"{fit.element_size}-byte elements"]
    return "yes" if not problems else "no: " + ", ".join(problems)
