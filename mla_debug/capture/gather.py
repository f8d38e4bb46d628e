"""From per-rank captured tensors to the TP-independent tensors the rest of mla_debug compares.

Each captured tensor says how it shards (`Shard`, decided when it was recorded): replicated tensors are
checked equal across ranks bit for bit (a weight every rank loaded, the layer input) and taken from rank
0; split tensors are concatenated in rank order on their shard dim (the same rule as
`mla_debug.parallel.sharding` applies to weights, and as `parallel.gather` applies to step outputs);
partial sums are summed in rank order in fp32, then cast back to the stored dtype, exactly as
`parallel.gather.sum_in_rank_order` does for mla_debug's own runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..model import Checkpoint
from ..parallel.gather import sum_in_rank_order
from .roles import RankDisagreement, Shard, TensorRole

if TYPE_CHECKING:
    from .types import Capture, CapturedTensor

# Linear modules of a V3 checkpoint that an engine may keep fused as one replicated linear (rows of the
# first, then rows of the second), so `checkpoint()` can split them back.
FUSED_QKV_A = ("fused_qkv_a_proj", ("q_a_proj", "kv_a_proj_with_mqa"))
# Attributes by which engines mark a weight whose bytes are no longer in checkpoint order.
RELAID_ATTRS = ("is_shuffled", "aiter_bpreshuffled")


def per_rank(capture: Capture, name: str) -> list[CapturedTensor]:
    """The rank-ordered captured tensors of `name`; KeyError naming the rank that lacks it."""
    found = []
    for rank in sorted(capture.ranks, key=lambda r: r.rank):
        if name not in rank.tensors:
            raise KeyError(
                f"{name}: rank {rank.rank} of {capture.tp_size} did not capture it "
                f"(it holds {sorted(rank.tensors)})"
            )
        found.append(rank.tensors[name])
    return found


def _as_comparable(t: torch.Tensor) -> torch.Tensor:
    """Bitwise view for comparisons (fp8 has no equality/subtraction on every backend)."""
    if t.dtype.is_floating_point and t.element_size() == 1:
        # A fresh dense copy: contiguous() keeps odd strides on size-1 dims, which view() refuses.
        return torch.empty(t.shape, dtype=t.dtype).copy_(t).view(torch.uint8)
    return t


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| of two same-shape tensors in fp32 (fp8 decoded to its values), NaN-aware: NaN where
    exactly one side is NaN counts as infinitely different."""
    x, y = a.to(torch.float32), b.to(torch.float32)
    nan_mismatch = torch.isnan(x) != torch.isnan(y)
    if bool(nan_mismatch.any()):
        return float("inf")
    diff = (x - y).abs().nan_to_num(nan=0.0)
    return float(diff.max()) if diff.numel() else 0.0


def _check_consistent(name: str, parts: list[CapturedTensor]) -> None:
    first = parts[0]
    for r, part in enumerate(parts[1:], start=1):
        if (part.shard, part.shard_dim, part.tensor.dtype) != (first.shard, first.shard_dim, first.tensor.dtype):
            raise ValueError(
                f"{name}: rank {r} recorded it as {part.shard.value}(dim {part.shard_dim}) {part.tensor.dtype}, "
                f"rank 0 as {first.shard.value}(dim {first.shard_dim}) {first.tensor.dtype}; ranks must agree"
            )


def check_replicated(name: str, parts: list[CapturedTensor]) -> None:
    """Every rank's bytes equal rank 0's, or `RankDisagreement` naming the first rank that differs."""
    reference = parts[0].tensor
    for r, part in enumerate(parts[1:], start=1):
        if part.tensor.shape != reference.shape:
            raise RankDisagreement(
                name, (0, r), float("inf"), f"shapes {tuple(reference.shape)} and {tuple(part.tensor.shape)}"
            )
        if not torch.equal(_as_comparable(part.tensor), _as_comparable(reference)):
            raise RankDisagreement(name, (0, r), max_abs_diff(reference, part.tensor))


def gather_tensor(capture: Capture, name: str) -> torch.Tensor:
    """The TP-independent tensor `name` (see the module docstring for the rules)."""
    parts = per_rank(capture, name)
    _check_consistent(name, parts)
    first = parts[0]
    if first.shard is Shard.PER_RANK and len(parts) > 1:
        raise ValueError(
            f"{name}: each rank holds its own value (recorded per rank), with no TP-independent form; "
            f"read capture.rank(r).tensors[{name!r}] instead"
        )
    if first.shard in (Shard.REPLICATED, Shard.PER_RANK):
        check_replicated(name, parts)
        return first.tensor
    tensors = [p.tensor for p in parts]
    if first.shard is Shard.SPLIT:
        dim = first.shard_dim
        for r, t in enumerate(tensors[1:], start=1):
            if t.dim() != first.tensor.dim() or any(
                t.shape[d] != first.tensor.shape[d] for d in range(t.dim()) if d != dim % t.dim()
            ):
                raise ValueError(
                    f"{name}: rank {r}'s shard {tuple(t.shape)} does not stack with rank 0's "
                    f"{tuple(first.tensor.shape)} on dim {dim}"
                )
        return torch.cat(tensors, dim=dim)
    for r, t in enumerate(tensors[1:], start=1):
        if t.shape != first.tensor.shape:
            raise ValueError(f"{name}: rank {r}'s partial sum {tuple(t.shape)} differs from rank 0's {tuple(first.tensor.shape)}")
    return sum_in_rank_order(tensors).to(first.tensor.dtype)


# vLLM 0.32 CPU's W8A16 kernel (model_executor/kernels/linear/scaled_mm/cpu.py:229, 277-283).
VNNI_PACKING_KERNEL = "CPUFp8BlockScaledMMKernel"


def _not_plain(capture: Capture, name: str) -> str | None:
    """Why `name`'s captured weight is not in checkpoint layout, or None when it is."""
    for rank, part in enumerate(per_rank(capture, name)):
        marked = [a for a in RELAID_ATTRS if part.attrs.get(a) is True]
        if name.endswith(".weight") and VNNI_PACKING_KERNEL in str(part.attrs.get("kernel", "")):
            return (
                f"rank {rank}'s {name} belongs to {VNNI_PACKING_KERNEL}, which VNNI-packs weights at load (vLLM's CPU "
                "build; its flags do not prove which were)"
            )
        if marked:
            flags = ", ".join(f"{a}=True" for a in marked)
            return f"rank {rank}'s {name} is marked {flags} (its bytes were relaid after loading)"
    return None


def capture_checkpoint(capture: Capture) -> Checkpoint:
    """The captured layer's weights as a `Checkpoint` (Hugging Face short names), when every linear's
    weight was captured in checkpoint layout; ValueError naming the weight otherwise.

    A fused q_a/kv_a linear is split back into its two modules by rows (and its block scale by
    row blocks). Weights an engine relaid (marked is_shuffled / aiter_bpreshuffled) or stored in
    another shape (a transposed copy) are refused: use the checkpoint the engine loaded instead.
    """
    cfg = capture.cfg
    weights = [n for n in capture.names() if capture.ranks[0].tensors[n].role in (TensorRole.WEIGHT, TensorRole.WEIGHT_SCALE)]
    if not weights:
        raise ValueError("capture holds no weights (it was taken with weights=False); use the user's checkpoint")
    tensors: dict[str, torch.Tensor] = {}
    for name in weights:
        reason = _not_plain(capture, name)
        if reason:
            raise ValueError(f"capture.checkpoint(): {reason}; use the checkpoint the engine loaded instead")
        tensors[name] = gather_tensor(capture, name)
    fused, (first, second) = FUSED_QKV_A
    if f"{fused}.weight" in tensors:
        _split_fused(cfg, tensors, fused, first, second)
    try:
        return Checkpoint.from_state_dict(
            cfg, tensors, layer=capture.manifest.layer, source=f"capture (tp_size {capture.tp_size})"
        )
    except ValueError as err:
        raise ValueError(
            f"capture.checkpoint(): the captured weights are not in checkpoint layout ({err}); "
            "use the checkpoint the engine loaded instead"
        ) from None


def _split_fused(cfg, tensors: dict[str, torch.Tensor], fused: str, first: str, second: str) -> None:
    weight = tensors.pop(f"{fused}.weight")
    rows = cfg.q_lora_rank
    if weight.dim() != 2 or weight.shape[0] != rows + cfg.kv_lora_rank + cfg.qk_rope_head_dim:
        raise ValueError(
            f"capture.checkpoint(): {fused}.weight has shape {tuple(weight.shape)}, expected "
            f"({rows + cfg.kv_lora_rank + cfg.qk_rope_head_dim}, {cfg.hidden_size}) = (Lq+Lkv+R, H)"
        )
    tensors.setdefault(f"{first}.weight", weight[:rows])
    tensors.setdefault(f"{second}.weight", weight[rows:])
    scale = tensors.pop(f"{fused}.weight_scale_inv", None)
    if scale is not None:
        block = cfg.weight_block[0]
        if rows % block:
            raise ValueError(
                f"capture.checkpoint(): {fused}'s block scale cannot be split: Lq={rows} is not a multiple of "
                f"the {block}-row weight block"
            )
        tensors.setdefault(f"{first}.weight_scale_inv", scale[: rows // block])
        tensors.setdefault(f"{second}.weight_scale_inv", scale[rows // block :])
