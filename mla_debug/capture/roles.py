"""What a captured tensor is to the layer (`TensorRole`), how a rank's tensor relates to the
TP-independent one (`Shard`), and the error when ranks that must agree do not."""

from __future__ import annotations

from enum import Enum


class TensorRole(str, Enum):
    """What a captured tensor is to the layer."""

    WEIGHT = "weight"  # a linear's or norm's weight, or a linear's block scale (see WEIGHT_SCALE)
    WEIGHT_SCALE = "weight_scale"  # a linear's block scale (weight_scale_inv), as stored
    DERIVED_WEIGHT = "derived_weight"  # W_UK, W_UV: matrices an engine derives from a weight and keeps
    INPUT = "input"  # what a step was given
    OUTPUT = "output"  # what a step returned
    INPUT_SCALE = "input_scale"  # an activation scale as the op produced or consumed it


class Shard(str, Enum):
    """How one rank's tensor relates to the TP-independent tensor (`Capture.gathered`).

    REPLICATED: every rank holds the whole tensor, and the ranks must agree. SPLIT: each rank holds a
    slice along `CapturedTensor.shard_dim`, in rank order (column-parallel weights and their outputs on
    dim 0 / the feature dim, row-parallel weights on dim 1, per-head tensors on their head dim).
    PARTIAL_SUM: each rank holds a partial sum (a row-parallel linear's output before its all-reduce);
    the whole is their sum in rank order. PER_RANK: each rank's own value with no TP-independent form (a
    per-tensor scale each rank computed for its own heads, a tensor under a name the sharding rules do not
    know); read it per rank.
    """

    REPLICATED = "replicated"
    SPLIT = "split"
    PARTIAL_SUM = "partial_sum"
    PER_RANK = "per_rank"


class RankDisagreement(ValueError):
    """Ranks that must hold the same tensor (a replicated weight, a replicated activation) do not."""

    def __init__(self, name: str, ranks: tuple[int, int], max_diff: float, detail: str = "") -> None:
        self.name, self.ranks, self.max_diff = name, ranks, max_diff
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"{name}: rank {ranks[0]} and rank {ranks[1]} hold different values where they must agree "
            f"(max |diff| {max_diff:.6g}){extra}"
        )
