"""What a triage's verdicts do not cover, as typed data: `Caveat`s recorded by the `TriageSession` and carried
by `TriageResult` and `TriageReport` (JSON "caveats", schema 5), said in words by `viz.caveats`.

A verdict is only as good as what the run exercised. Four things limit it here:

- ``indexer-not-modelled``: the layer is DeepSeek-V3.2's, whose sparse top-k indexer is recognised and
  not run (`model.indexer`); `tensors` are the indexer tensors the checkpoint holds (skipped, unread).
- ``tokens-above-index-topk``: more tokens than ``index_topk`` on such a layer - the real layer attends to
  at most ``index_topk`` keys per query, the run here to all of them, so its numbers are not the model's.
- ``weights-quantized-here``: a dense checkpoint was block-quantized by `recipe` before the triage (a
  dense one is refused, `model.weight_recipe`): verdicts are about those FP8 weights, not a release's.
- ``tensors-ignored``: unknown attention tensors were skipped on request (``ignore_extra``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .._json_records import JsonRecord
from ..model import Checkpoint
from ..model.indexer import exact_for, has_v32_indexer
from ..model.weight_recipe import WeightRecipe


class CaveatKind(str, Enum):
    INDEXER_NOT_MODELLED = "indexer-not-modelled"
    TOKENS_ABOVE_INDEX_TOPK = "tokens-above-index-topk"
    WEIGHTS_QUANTIZED_HERE = "weights-quantized-here"
    TENSORS_IGNORED = "tensors-ignored"


@dataclass(frozen=True)
class Caveat(JsonRecord):
    """One limit of a triage's verdicts (see the module docstring for each kind and its data)."""

    kind: CaveatKind
    tensors: tuple[str, ...] = ()
    index_topk: int | None = None
    tokens: int | None = None
    recipe: WeightRecipe | None = None


def caveats_of(ckpt: Checkpoint, tokens: int, recipe: WeightRecipe | None) -> list[Caveat]:
    """The caveats of triaging `tokens` tokens on `ckpt` (quantized here by `recipe`, or not), in the
    order a reader needs them: what the weights are, then what the layer's model leaves out."""
    cfg = ckpt.cfg
    out = []
    if recipe is not None:
        out.append(Caveat(CaveatKind.WEIGHTS_QUANTIZED_HERE, recipe=recipe))
    if ckpt.ignored:
        out.append(Caveat(CaveatKind.TENSORS_IGNORED, tensors=ckpt.ignored))
    if has_v32_indexer(cfg):
        out.append(Caveat(CaveatKind.INDEXER_NOT_MODELLED, tensors=ckpt.unmodelled, index_topk=cfg.index_topk))
        if not exact_for(cfg, tokens):
            out.append(Caveat(CaveatKind.TOKENS_ABOVE_INDEX_TOPK, index_topk=cfg.index_topk, tokens=tokens))
    return out
