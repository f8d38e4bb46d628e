"""A triage's caveats and token positions in words, for the terminal, the HTML report and notebooks.

The caveats are `triage.caveats.Caveat` values; each becomes one sentence here, the only place they
are worded. `CaveatLine.warning` marks the one that makes the numbers differ from the model's (more
tokens than DeepSeek-V3.2's indexer keeps), which readers show in warning colours.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..triage.caveats import Caveat, CaveatKind
from ..triage.positions import TokenPositions

# Tensor names listed in full up to this many; beyond, the count and the first few.
_SHOWN = 8


@dataclass(frozen=True)
class CaveatLine:
    label: str
    text: str
    warning: bool = False


def _names(tensors: tuple[str, ...]) -> str:
    if len(tensors) <= _SHOWN:
        return ", ".join(tensors)
    return f"{', '.join(tensors[:_SHOWN])} and {len(tensors) - _SHOWN} more"


def caveat_line(caveat: Caveat) -> CaveatLine:
    """One caveat as a label and a sentence."""
    if caveat.kind is CaveatKind.WEIGHTS_QUANTIZED_HERE:
        recipe = caveat.recipe
        block = "x".join(map(str, recipe.block))
        power = "; scales rounded up to powers of two (the config's scale_fmt ue8m0)" if recipe.ue8m0 else ""
        return CaveatLine(
            "weights quantized here",
            f"the checkpoint's dense linear weights were block-quantized before the triage with the "
            f"{recipe.flavor} recipe ({recipe.fmt}, {block} blocks: {recipe.description}{power}); the verdicts are "
            "about those FP8 weights, as a serving engine would see an FP8 checkpoint made this way",
        )
    if caveat.kind is CaveatKind.TENSORS_IGNORED:
        return CaveatLine(
            "tensors ignored",
            f"{len(caveat.tensors)} attention tensor(s) this toolkit does not know were skipped on request "
            f"(ignore_extra / --ignore-extra): {_names(caveat.tensors)}",
        )
    if caveat.kind is CaveatKind.INDEXER_NOT_MODELLED:
        held = (
            f"its {len(caveat.tensors)} tensors in the checkpoint ({_names(caveat.tensors)}) were skipped, unread"
            if caveat.tensors
            else "the weights hold no indexer tensors"
        )
        return CaveatLine(
            "indexer present, not modelled",
            f"DeepSeek-V3.2's sparse top-k indexer is not run ({held}); the MLA attention runs densely, which is "
            f"exact while no query sees more than index_topk={caveat.index_topk} keys (up to "
            f"{caveat.index_topk} tokens); the indexer's own GEMMs and their FP8 kernels are not triaged",
        )
    if caveat.kind is CaveatKind.TOKENS_ABOVE_INDEX_TOPK:
        return CaveatLine(
            "tokens above index_topk",
            f"{caveat.tokens} tokens exceed index_topk={caveat.index_topk}: the real layer attends to at most "
            f"{caveat.index_topk} keys per query (those its indexer picks), this run to every earlier token, so "
            "its outputs are not the model's - the comparison of kernels and layouts still holds",
            warning=True,
        )
    raise ValueError(f"no words for caveat kind {caveat.kind!r}")


def caveat_lines(caveats: list[Caveat]) -> list[CaveatLine]:
    return [caveat_line(c) for c in caveats]


def positions_text(positions: TokenPositions, tokens: int) -> str:
    """Where the tokens sat: ``positions 5000..5015``, or ``explicit positions 7, 9, ...``."""
    values = positions.values(tokens)
    if not values:
        return "no positions"
    if positions.contiguous:
        return f"positions {values[0]}..{values[-1]}" if len(values) > 1 else f"position {values[0]}"
    shown = ", ".join(map(str, values[:8])) + (f", ... ({len(values)} in all)" if len(values) > 8 else "")
    return f"explicit positions {shown}"
