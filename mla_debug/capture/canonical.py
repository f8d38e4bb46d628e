"""The canonical modules of a DeepSeek-V3-style MLA layer, and how each of their tensors shards.

Every name map (transformers, vLLM, SGLang, a user's dict) points module-tree names at these canonical
modules; from the canonical module follow the step a tensor belongs to, the name its inputs and outputs
are recorded under, and the rule that turns one rank's tensor into the TP-independent one (the
sharding table of docs/semantics.md §12, the same as `parallel.sharding`'s V3_LINEARS).

Whether a rank holds a split or the whole tensor is read from the tensor's own size, not assumed from the
engine: transformers' default DeepSeek-V3 plan, for one, leaves the attention replicated under
tensor parallelism, and then every rank holds whole weights and whole outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import MLAConfig
from ..parallel.sharding import COLUMN, REPLICATED, ROW
from .roles import Shard

ATTENTION, ROPE = "attention", "rope"


@dataclass(frozen=True)
class CanonicalModule:
    """A module of the layer: the step its call belongs to, the prefix of its op tensors' names
    (`<op>.input`, `<op>.output`), how its weight shards, and its input and output widths (features
    of the TP-independent tensors, as functions of the config)."""

    name: str
    step: str
    op: str
    parallel: str
    is_linear: bool = True

    def widths(self, cfg: MLAConfig) -> tuple[int, int]:
        h, nh, lq, lkv = cfg.hidden_size, cfg.num_heads, cfg.q_lora_rank, cfg.kv_lora_rank
        p, r, v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        return {
            "q_a_proj": (h, lq),
            "kv_a_proj_with_mqa": (h, lkv + r),
            "fused_qkv_a_proj": (h, lq + lkv + r),
            "q_a_layernorm": (lq, lq),
            "kv_a_layernorm": (lkv, lkv),
            "q_b_proj": (lq, nh * (p + r)),
            "kv_b_proj": (lkv, nh * (p + v)),
            ATTENTION: (nh * (p + r), nh * v),
            "o_proj": (nh * v, h),
        }[self.name]


MODULES: dict[str, CanonicalModule] = {
    m.name: m
    for m in (
        CanonicalModule("q_a_proj", "fused_qkv_a", "q_a_proj", REPLICATED),
        CanonicalModule("kv_a_proj_with_mqa", "fused_qkv_a", "kv_a_proj_with_mqa", REPLICATED),
        CanonicalModule("fused_qkv_a_proj", "fused_qkv_a", "fused_qkv_a", REPLICATED),
        CanonicalModule("q_a_layernorm", "q_a_layernorm", "q_a_layernorm", REPLICATED, is_linear=False),
        CanonicalModule("kv_a_layernorm", "kv_a_layernorm", "kv_a_layernorm", REPLICATED, is_linear=False),
        CanonicalModule("q_b_proj", "q_b_proj", "q_b_proj", COLUMN),
        CanonicalModule("kv_b_proj", "kv_b_proj", "kv_b_proj", COLUMN),
        # The attention op proper: per-head inputs and outputs, column-like (heads split over ranks).
        CanonicalModule(ATTENTION, ATTENTION, ATTENTION, COLUMN, is_linear=False),
        CanonicalModule("o_proj", "o_proj", "o_proj", ROW),
    )
}

# Weights an engine derives from kv_b_proj and keeps for absorbed decode; heads are their split dim.
DERIVED = ("W_UK", "W_UV")
# Scales kept beside derived weights: one per matrix, or one both share (SGLang's w_scale).
DERIVED_SCALES = ("W_UK.scale", "W_UV.scale", "W_scale")
LAYER_INPUT, LAYER_OUTPUT, POSITIONS = "layer.input", "layer.output", "positions"


def weight_shape(cfg: MLAConfig, module: str) -> tuple[int, int]:
    """(N, K) of a canonical linear's TP-independent weight."""
    k, n = MODULES[module].widths(cfg)
    return (n, k)


def _decide(name: str, local: int, full: int, tp_size: int, dim: int) -> tuple[Shard, int | None]:
    """REPLICATED when the rank holds the whole extent, SPLIT when it holds 1/tp of it, else an error."""
    if local == full:
        return Shard.REPLICATED, None
    if local * tp_size == full:
        return Shard.SPLIT, dim
    raise ValueError(
        f"{name}: size {local} on dim {dim} is neither the whole {full} nor 1/{tp_size} of it "
        f"(tp_size={tp_size}); the capture's config or tp_size does not match the model"
    )


def weight_shard(cfg: MLAConfig, module: str, name: str, shape: tuple[int, ...], tp_size: int, scale: bool):
    """How a linear's weight (or its block scale, `scale`) shards, from its local shape."""
    canonical = MODULES[module]
    if canonical.parallel == REPLICATED or len(shape) != 2:
        return Shard.REPLICATED, None
    n, k = weight_shape(cfg, module)
    if scale:
        n, k = -(-n // cfg.weight_block[0]), -(-k // cfg.weight_block[1])
    dim = 0 if canonical.parallel == COLUMN else 1
    return _decide(name, shape[dim], (n, k)[dim], tp_size, dim)


def activation_shard(
    cfg: MLAConfig, module: str, name: str, width: int, tp_size: int, output: bool, reduced: bool, group: int = 1
) -> tuple[Shard, int | None]:
    """How an op's input (or output) of `width` features per row shards. `group` divides the widths
    (an activation scale has one value per group of 128 features). A row-parallel output is a partial
    sum unless the engine's module already all-reduced it (`reduced`)."""
    canonical = MODULES[module]
    full = canonical.widths(cfg)[1 if output else 0] // group
    if module == ATTENTION:  # per-head in and out
        return _decide(name, width, full, tp_size, -1)
    if canonical.parallel == ROW and output:
        if width != full:
            raise ValueError(f"{name}: {width} features per row, expected the whole {full}")
        return (Shard.REPLICATED, None) if reduced or tp_size == 1 else (Shard.PARTIAL_SUM, None)
    if canonical.parallel == REPLICATED or (canonical.parallel == COLUMN and not output):
        if width != full:
            raise ValueError(f"{name}: {width} features per row, expected the whole {full} (a replicated tensor)")
        return Shard.REPLICATED, None
    return _decide(name, width, full, tp_size, -1)


def derived_shard(cfg: MLAConfig, name: str, shape: tuple[int, ...], head_dim: int, tp_size: int):
    """Derived weights hold Nh/t heads on `head_dim`. A scale beside them that has no head dim (one
    value per rank's matrices, computed from that rank's heads) is the rank's own."""
    if len(shape) > head_dim and shape[head_dim] in (cfg.num_heads, cfg.num_heads // tp_size):
        return _decide(name, shape[head_dim], cfg.num_heads, tp_size, head_dim)
    if name in DERIVED:
        raise ValueError(
            f"{name}: shape {shape} has neither {cfg.num_heads} heads nor {cfg.num_heads // tp_size} per rank "
            f"on dim {head_dim} (tp_size={tp_size})"
        )
    return (Shard.REPLICATED, None) if tp_size == 1 else (Shard.PER_RANK, None)
