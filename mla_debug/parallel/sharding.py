"""Tensor-parallel sharding rules of the MLA layers (docs/semantics.md §12), applied as views, not copies.

Column-parallel linears keep rows of Nh/t heads (or G/t output groups); row-parallel ones keep input
columns and produce partial sums; replicated ones are whole on every rank. Block scales shard with their
weights, so every per-rank shard that a 128x128 block grid cuts must be a multiple of 128.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..layouts import QuantizedWeight

COLUMN, ROW, REPLICATED = "column", "row", "replicated"


@dataclass(frozen=True)
class LinearSpec:
    """One serving-engine linear: checkpoint modules it is made of (rows concatenated), how it shards,
    and the direct-read flags the model sets on it."""

    name: str
    sources: tuple[str, ...]
    parallel: str
    flags: dict = field(default_factory=dict)


V3_LINEARS = (
    LinearSpec("fused_qkv_a_proj", ("q_a_proj", "kv_a_proj_with_mqa"), REPLICATED),
    LinearSpec("q_b_proj", ("q_b_proj",), COLUMN),
    # MLA's absorbed decode reads kv_b_proj's raw weight, so MLA marks it (vLLM PR #56433).
    LinearSpec("kv_b_proj", ("kv_b_proj",), COLUMN, {"skip_weight_relayout": True}),
    LinearSpec("o_proj", ("o_proj",), ROW),
)
V4_LINEARS = (
    LinearSpec("fused_wqa_wkv", ("wq_a", "wkv"), REPLICATED),
    LinearSpec("wq_b", ("wq_b",), COLUMN),
    # wo_a is read as a grouped BMM, never through its linear: vLLM marks it is_bmm, SGLang
    # keep_plain_weight_layout (SGLang 0.5.23 models/deepseek_v4.py); each engine's kernels read their own.
    LinearSpec("wo_a", ("wo_a",), COLUMN, {"is_bmm": True, "keep_plain_weight_layout": True}),
    LinearSpec("wo_b", ("wo_b",), ROW),
    LinearSpec("indexer.wq_b", ("indexer.wq_b",), REPLICATED),
)
V3_NORMS = ("q_a_layernorm", "kv_a_layernorm")
V4_NORMS = ("q_norm", "kv_norm")


def linear_specs(cfg) -> tuple[LinearSpec, ...]:
    return V3_LINEARS if cfg.arch == "v3" else V4_LINEARS


def norm_names(cfg) -> tuple[str, ...]:
    return V3_NORMS if cfg.arch == "v3" else V4_NORMS


def full_weight(ckpt, spec: LinearSpec, dtype: torch.dtype) -> QuantizedWeight | torch.Tensor:
    """The unsharded weight of `spec` (fused linears concatenate their sources' rows)."""
    if not ckpt.quantized:
        # The layer only reads its weights: no copy of a dense checkpoint's (a real-size layer's fp32
        # weights are most of a triage's memory while its truth is computed).
        parts = [ckpt.dense_weight(source, dtype=torch.float32, copy=False) for source in spec.sources]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    parts = [ckpt.quantized_weight(source) for source in spec.sources]
    if len(parts) == 1:
        return parts[0]
    block_rows = parts[0].block[0]
    for source, part in zip(spec.sources[:-1], parts[:-1]):
        if part.n % block_rows:
            raise ValueError(
                f"{spec.name}: {source} has N={part.n} rows, not a multiple of {block_rows}; its block scales "
                "cannot be concatenated with the next module's"
            )
    return QuantizedWeight(
        torch.cat([p.data for p in parts]), torch.cat([p.scale for p in parts]), parts[0].fmt, block=parts[0].block
    )


def shard(weight: QuantizedWeight | torch.Tensor, spec: LinearSpec, tp_size: int, rank: int):
    """Rank `rank`'s part of `weight` under `spec.parallel`, as views of the full tensors."""
    if spec.parallel == REPLICATED or tp_size == 1:
        return weight
    dim = 0 if spec.parallel == COLUMN else 1
    size = weight.shape[dim] if isinstance(weight, torch.Tensor) else (weight.n if dim == 0 else weight.k)
    what = "rows (N)" if dim == 0 else "columns (K)"
    if size % tp_size:
        raise ValueError(f"{spec.name}: {size} {what} cannot be split over tp_size={tp_size}")
    part = size // tp_size
    if isinstance(weight, torch.Tensor):
        return weight.narrow(dim, rank * part, part)
    block = weight.block[dim]
    if part % block:
        raise ValueError(
            f"{spec.name}: the per-rank shard of {part} {what} at tp_size={tp_size} is not a multiple of {block}, "
            "so the 128x128 block scales cannot shard with the weight"
        )
    data = weight.data.narrow(dim, rank * part, part)
    scale = weight.scale.narrow(dim, rank * part // block, part // block)
    return QuantizedWeight(data, scale, weight.fmt, block=weight.block)
