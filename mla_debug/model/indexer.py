"""DeepSeek-V3.2's lightning indexer: the tensors a checkpoint carries for it, recognised and not modelled.

A V3.2 attention layer is DeepSeek-V3's MLA with an indexer beside it (transformers' ``DeepseekV32Indexer``,
vLLM 0.33.0's ``Indexer`` in ``model_executor/models/deepseek_v2.py``, DeepSeek's ``inference/model.py``).
Its tensors sit under ``self_attn.indexer.``:

- ``wq_b.weight`` (index_n_heads * index_head_dim, Lq) and ``wk.weight`` (index_head_dim, H): FP8 with a
  ``weight_scale_inv`` in DeepSeek's release;
- ``k_norm.weight`` and ``k_norm.bias`` (index_head_dim,): a LayerNorm;
- ``weights_proj.weight`` (index_n_heads, H): bf16 in DeepSeek's release (fp32 in transformers).

Per query the indexer scores every visible key and keeps the ``index_topk`` best; the MLA attention then
attends to those only. This toolkit runs the MLA part densely: a query that sees at most ``index_topk``
keys keeps all of them, so a run is exact while it has at most ``index_topk`` tokens (a layer run sees
only its own tokens). Above that the real layer attends to fewer keys than the dense one here: a run is
still made, with `SparseAttentionWarning`. `Checkpoint` skips the indexer's tensors without reading them
and lists them (``Checkpoint.unmodelled``), so reports and the CLI can say the indexer is present and
not modelled.
"""

from __future__ import annotations

import warnings

from .config import MLAConfig

PREFIX = "indexer."
# Each module of the indexer and the tensor names a checkpoint may hold for it.
TENSORS = {
    "wq_b": ("weight", "weight_scale_inv"),
    "wk": ("weight", "weight_scale_inv"),
    "k_norm": ("weight", "bias"),
    "weights_proj": ("weight", "weight_scale_inv"),
}


class SparseAttentionWarning(UserWarning):
    """A DeepSeek-V3.2 layer run with more tokens than ``index_topk``: the real layer's sparse attention
    sees at most ``index_topk`` keys per query, the dense run here sees all of them."""


def has_v32_indexer(cfg: MLAConfig) -> bool:
    """Whether `cfg` is a DeepSeek-V3.2 layer: MLA (v3) with the sparse indexer beside it."""
    return cfg.arch == "v3" and cfg.has_indexer


def indexer_keys(cfg: MLAConfig) -> tuple[str, ...]:
    """The short names (``indexer.wq_b.weight``, ...) a checkpoint of `cfg` may hold for its indexer;
    empty unless `cfg` is a DeepSeek-V3.2 layer."""
    if not has_v32_indexer(cfg):
        return ()
    return tuple(f"{PREFIX}{module}.{name}" for module, names in TENSORS.items() for name in names)


def exact_for(cfg: MLAConfig, tokens: int) -> bool:
    """Whether a dense run of `tokens` tokens computes what `cfg`'s layer computes: always without the
    V3.2 indexer, else while no query can see more than ``index_topk`` keys."""
    return not has_v32_indexer(cfg) or tokens <= cfg.index_topk


def warn_if_inexact(cfg: MLAConfig, tokens: int, stacklevel: int = 2) -> bool:
    """`warnings.warn` a `SparseAttentionWarning` when `exact_for` is False; returns whether it warned."""
    if exact_for(cfg, tokens):
        return False
    warnings.warn(
        SparseAttentionWarning(
            f"{cfg.name}: {tokens} tokens exceed index_topk={cfg.index_topk}; DeepSeek-V3.2's sparse indexer "
            f"is not modelled, so this run attends to every earlier token where the real layer attends to the "
            f"{cfg.index_topk} its indexer picks - results are exact only up to {cfg.index_topk} tokens"
        ),
        stacklevel=stacklevel + 1,
    )
    return True
