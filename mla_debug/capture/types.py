"""What a capture is made of: typed data, no behaviour beyond reading it.

A capture records one attention layer of a running model, per tensor-parallel rank, under the canonical
(Hugging Face short) names the rest of mla_debug uses: weights (``q_b_proj.weight``,
``q_b_proj.weight_scale_inv``, ...), weights an engine derives and keeps (``W_UK``, ``W_UV``), and the
inputs, outputs and activation scales of each step (``q_b_proj.input``, ``q_b_proj.output``,
``q_b_proj.input_scale``, ``layer.input``, ``layer.output``, ``positions``). Every tensor is kept exactly
as the engine stored it - dtype, shape, strides, storage offset - because the bugs this tool hunts live
in exactly those (a scale whose strides lie, a weight shuffled in place).

How a rank's tensor becomes the TP-independent one is data too (`Shard`): the capture decides it from
the module-name map when it records, so loading needs no knowledge of the engine.

Canonical names, in full:
- weights ``<module>.weight`` and, where the engine keeps them, ``<module>.weight_scale_inv`` (block
  scale), ``<module>.weight_scale`` (per-tensor or per-channel) and ``<module>.input_scale`` (a static
  activation scale), for the modules q_a_proj, kv_a_proj_with_mqa, fused_qkv_a_proj (engines that fuse the
  two: q_a rows then kv_a rows), q_a_layernorm, kv_a_layernorm, q_b_proj, kv_b_proj, o_proj;
- derived ``W_UK`` and ``W_UV`` in the engine's own shape and layout (attrs ``engine_attr`` names the
  engine's attribute, ``axes`` its dims where the map knows them), their scales ``W_UK.scale``,
  ``W_UV.scale``, or ``W_scale`` when both share one;
- op tensors ``<op>.input``, ``<op>.output``, ``<op>.input_scale`` where op is the module's step name
  (``fused_qkv_a`` for the fused linear, ``attention`` for the attention op proper) or, for an engine
  that does not fuse q_a and kv_a, ``q_a_proj`` and ``kv_a_proj_with_mqa`` (both of step fused_qkv_a);
  ``layer.input`` and ``layer.output`` (the attention module's own input and output) and ``positions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

import torch

from ..model import MLAConfig
from .gather import capture_checkpoint, gather_tensor
from .roles import Shard, TensorRole

if TYPE_CHECKING:
    from ..model import Checkpoint

# Version of the folder format (manifest.json + tensors.safetensors per rank); a loader refuses others.
FORMAT_VERSION = 1

AttrValue = str | int | float | bool


@dataclass(frozen=True)
class CapturedTensor:
    """One tensor of one rank, exactly as the engine held it.

    `name` is the canonical name; `step` the mla_debug step it belongs to (names of `mla_debug.model`'s
    programs: fused_qkv_a, q_a_layernorm, kv_a_layernorm, q_b_proj, rope, kv_b_proj, absorb_uk,
    attention, absorb_uv, o_proj; None for a weight not tied to one step); `tensor` has the dtype,
    shape, strides and storage offset the engine's tensor had (its storage holds only the bytes the view
    spans); `source_name` is where it was found in the captured module tree
    (``model.layers.3.self_attn.q_b_proj.weight``); `attrs` the attributes the engine hung on it
    (is_shuffled, aiter_bpreshuffled, is_bmm, keep_plain_weight_layout, kernel, ...).
    """

    name: str
    role: TensorRole
    tensor: torch.Tensor
    step: str | None = None
    source_name: str = ""
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    shard: Shard = Shard.REPLICATED
    shard_dim: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tensor, torch.Tensor):
            raise TypeError(f"captured tensor {self.name!r}: expected a torch.Tensor, got {type(self.tensor).__name__}")
        if not isinstance(self.role, TensorRole):
            object.__setattr__(self, "role", TensorRole(self.role))
        if not isinstance(self.shard, Shard):
            object.__setattr__(self, "shard", Shard(self.shard))
        if self.shard is Shard.SPLIT:
            if self.shard_dim is None or not -self.tensor.dim() <= self.shard_dim < self.tensor.dim():
                raise ValueError(
                    f"captured tensor {self.name!r} of shape {tuple(self.tensor.shape)}: a SPLIT tensor needs a "
                    f"shard_dim within its {self.tensor.dim()} dims, got {self.shard_dim}"
                )
        for key, value in self.attrs.items():
            if not isinstance(value, (str, int, float, bool)):
                raise TypeError(
                    f"captured tensor {self.name!r}: attribute {key!r} must be str/int/float/bool, "
                    f"got {type(value).__name__}"
                )


@dataclass(frozen=True)
class EngineInfo:
    """The engine that ran the captured model: "transformers", "vllm", "sglang", or a user's name."""

    name: str
    version: str | None = None


class UnrecordedReason(str, Enum):
    """Why a tensor the name map points at is not in the capture."""

    RELEASED = "released"  # the engine freed it after loading (an empty tensor stands in its place)


@dataclass(frozen=True)
class Unrecorded:
    """A mapped tensor the capture could not hold, why, and what the engine keeps instead (`detail`
    names the engine's attention backend where that decides it)."""

    name: str
    reason: UnrecordedReason
    detail: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.reason, UnrecordedReason):
            object.__setattr__(self, "reason", UnrecordedReason(self.reason))

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason.value, "detail": self.detail}

    @classmethod
    def from_json(cls, data: dict) -> Unrecorded:
        return cls(str(data["name"]), UnrecordedReason(data["reason"]), str(data.get("detail", "")))


@dataclass(frozen=True)
class CaptureManifest:
    """What every rank of one capture shares.

    `tokens` are the rows of the forward's flattened (batch * sequence) activations that were kept, in
    order; `positions` their rotary positions. `mode` is "prefill" or "decode" when known. `versions`
    names the libraries that were importable when capturing (torch, transformers, vllm, sglang, aiter,
    mla_debug), each with its version. `key_positions` are the positions of every key the kept rows
    attended to (their own, the call's other rows, a KV cache's), when the recorder could tell; the
    rows among them that are not kept are the tensor ``context.input`` (capture.context).
    `attention_backend` is the engine's attention backend where it has a choice (vLLM's CPU build: "AMX_MLA" or "CPU_MLA"); `unrecorded` the
    mapped tensors the engine did not leave to record (`Unrecorded`).
    """

    engine: EngineInfo
    cfg: MLAConfig
    layer: int
    tp_size: int
    positions: tuple[int, ...]
    tokens: tuple[int, ...]
    model_type: str | None = None
    mode: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    note: str = ""
    key_positions: tuple[int, ...] | None = None
    format_version: int = FORMAT_VERSION
    attention_backend: str | None = None
    unrecorded: tuple[Unrecorded, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "unrecorded", tuple(self.unrecorded))
        object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))
        if self.key_positions is not None:
            object.__setattr__(self, "key_positions", tuple(int(p) for p in self.key_positions))
        object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))
        if len(self.positions) != len(self.tokens):
            raise ValueError(
                f"capture manifest: {len(self.tokens)} kept token rows but {len(self.positions)} positions; "
                "each kept row needs its position"
            )
        if self.tp_size < 1:
            raise ValueError(f"capture manifest: tp_size must be >= 1, got {self.tp_size}")
        if self.mode not in (None, "prefill", "decode"):
            raise ValueError(f"capture manifest: mode must be 'prefill', 'decode' or None, got {self.mode!r}")


@dataclass(frozen=True)
class RankCapture:
    """The tensors one rank recorded, by canonical name."""

    rank: int
    tp_size: int
    tensors: dict[str, CapturedTensor]

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.tp_size:
            raise ValueError(f"rank capture: rank {self.rank} is outside tp_size {self.tp_size}")

    def __getitem__(self, name: str) -> CapturedTensor:
        if name not in self.tensors:
            raise KeyError(f"rank {self.rank} of {self.tp_size} holds no tensor {name!r}; it holds {sorted(self.tensors)}")
        return self.tensors[name]


@dataclass(frozen=True)
class Capture:
    """All ranks of one capture at one TP size, as `md.load_capture(path)` returns it.

    `gathered(name)` gives the TP-independent tensor (rules in `capture.gather`), `checkpoint()` the
    layer's weights as a `Checkpoint` when the capture holds them in their checkpoint layout.
    """

    manifest: CaptureManifest
    ranks: list[RankCapture]

    @property
    def cfg(self) -> MLAConfig:
        return self.manifest.cfg

    @property
    def tp_size(self) -> int:
        return self.manifest.tp_size

    @property
    def positions(self) -> torch.Tensor:
        return torch.tensor(self.manifest.positions, dtype=torch.long)

    @property
    def hidden(self) -> torch.Tensor:
        """The layer input of the kept tokens, (tokens, H)."""
        return self.gathered("layer.input")

    def rank(self, r: int) -> RankCapture:
        for rank in self.ranks:
            if rank.rank == r:
                return rank
        raise KeyError(f"capture at tp_size {self.tp_size} has no rank {r}; it has {[x.rank for x in self.ranks]}")

    def names(self, role: TensorRole | str | None = None) -> list[str]:
        """Canonical names rank 0 holds (every rank holds the same set), in recording order."""
        wanted = None if role is None else TensorRole(role)
        return [n for n, t in self.ranks[0].tensors.items() if wanted is None or t.role is wanted]

    def gathered(self, name: str) -> torch.Tensor:
        return gather_tensor(self, name)

    def checkpoint(self) -> Checkpoint:
        return capture_checkpoint(self)
