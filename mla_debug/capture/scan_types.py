"""What a whole-model scan is made of: typed data, no behaviour beyond reading it.

A scan records, in one forward, every decoder layer's residual stream (the layer's input and output),
its attention input (after the input norm) and its attention output, per tensor-parallel rank - not the
tensors themselves but compact summaries that two runs can be compared by:

- ``token_norms``: the L2 norm of every kept token row (float32);
- ``columns``: the kept token rows at a fixed, evenly spaced subset of the features, in the tensor's own
  dtype (the values themselves, so two runs' relative error on that sample is exact);
- ``rows``: a few whole token rows (for the outputs), in the tensor's own dtype;
- ``checksum``: an integer digest of the whole tensor's bytes (all rows): equal bytes, equal digest.

Columns and rows are linear in the tensor, so a partial sum (a row-parallel output before its
all-reduce) gathers by summing the ranks' summaries; norms and checksums do not, and are read per rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import torch

from .roles import Shard

SCAN_FORMAT_VERSION = 1


class ScanStep(str, Enum):
    """The tensors a scan records for each decoder layer, in the order the layer produces them."""

    LAYER_INPUT = "layer.input"  # the residual stream entering the decoder layer
    ATTN_INPUT = "attn.input"  # the attention module's hidden-states input (after the input norm)
    ATTN_OUTPUT = "attn.output"  # the attention module's output (after o_proj)
    LAYER_OUTPUT = "layer.output"  # the residual stream leaving the decoder layer (after the MLP)


STEPS = tuple(ScanStep)


@dataclass(frozen=True)
class StepSummary:
    """One step of one layer on one rank.

    `rows_total` and `features` are the whole tensor's (rows of its flattened leading dims); the
    summaries keep `ScanManifest.tokens` of those rows, `ScanManifest.columns` of the features (a
    column index past `features` is not kept), and the whole rows `ScanManifest.row_tokens`.
    `nonfinite` counts NaN/Inf values in the whole tensor.
    """

    layer: int
    step: ScanStep
    rows_total: int
    features: int
    dtype: str
    shard: Shard
    checksum: str
    nonfinite: int
    token_norms: torch.Tensor
    columns: torch.Tensor
    rows: torch.Tensor

    def __post_init__(self) -> None:
        if not isinstance(self.step, ScanStep):
            object.__setattr__(self, "step", ScanStep(self.step))
        if not isinstance(self.shard, Shard):
            object.__setattr__(self, "shard", Shard(self.shard))
        if self.shard not in (Shard.REPLICATED, Shard.PARTIAL_SUM):
            raise ValueError(
                f"scan summary of layer {self.layer} {self.step.value}: shard {self.shard.value} is not one a "
                "hidden-size tensor has (replicated or partial_sum)"
            )
        if self.token_norms.dim() != 1 or self.columns.dim() != 2 or self.rows.dim() != 2:
            raise ValueError(
                f"scan summary of layer {self.layer} {self.step.value}: norms must be 1-D, columns and rows 2-D; got "
                f"{tuple(self.token_norms.shape)}, {tuple(self.columns.shape)}, {tuple(self.rows.shape)}"
            )
        if self.columns.shape[0] != self.token_norms.shape[0]:
            raise ValueError(
                f"scan summary of layer {self.layer} {self.step.value}: {self.columns.shape[0]} column-sample rows "
                f"for {self.token_norms.shape[0]} kept tokens"
            )

    @property
    def key(self) -> str:
        return f"L{self.layer}.{self.step.value}"


@dataclass(frozen=True)
class ScanManifest:
    """What every rank of one scan shares.

    `layers` are the decoder layers found (in model order); `tokens` the kept rows of the flattened
    (batch * sequence) activations; `columns` the sampled feature indices; `row_tokens` the kept rows
    whose whole rows are recorded. `engine` and `model_type` say which recipe can capture one layer of
    the same model; `hf_config` is the model's config as a dict where it was found.
    """

    engine: str
    engine_version: str | None
    tp_size: int
    layers: tuple[int, ...]
    tokens: tuple[int, ...]
    columns: tuple[int, ...]
    row_tokens: tuple[int, ...]
    layer_path: str  # e.g. "model.layers.{layer}" - where the layers sit in the module tree
    attention_attr: str
    map_key: str
    model_type: str | None = None
    hf_config: dict | None = None
    call: int = 0
    versions: dict[str, str] = field(default_factory=dict)
    note: str = ""
    format_version: int = SCAN_FORMAT_VERSION

    def __post_init__(self) -> None:
        for name in ("layers", "tokens", "columns", "row_tokens"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        if self.tp_size < 1:
            raise ValueError(f"scan manifest: tp_size must be >= 1, got {self.tp_size}")
        if not set(self.row_tokens) <= set(self.tokens):
            raise ValueError(f"scan manifest: row_tokens {self.row_tokens} must be among the kept tokens")


@dataclass(frozen=True)
class RankScan:
    """The summaries one rank recorded, by (layer, step)."""

    rank: int
    tp_size: int
    summaries: dict[tuple[int, ScanStep], StepSummary]

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.tp_size:
            raise ValueError(f"rank scan: rank {self.rank} is outside tp_size {self.tp_size}")

    def get(self, layer: int, step: ScanStep | str) -> StepSummary | None:
        return self.summaries.get((layer, ScanStep(step)))


@dataclass(frozen=True)
class Scan:
    """All ranks of one scan, as `md.capture.load_scan(path)` returns it."""

    manifest: ScanManifest
    ranks: list[RankScan]
    path: str = ""

    @property
    def tp_size(self) -> int:
        return self.manifest.tp_size

    @property
    def layers(self) -> tuple[int, ...]:
        return self.manifest.layers

    def rank(self, r: int) -> RankScan:
        for rank in self.ranks:
            if rank.rank == r:
                return rank
        raise KeyError(f"scan at tp_size {self.tp_size} has no rank {r}; it has {[x.rank for x in self.ranks]}")


@dataclass(frozen=True)
class GatheredSummary:
    """One (layer, step) of a scan made TP-independent (`gather_summary`), in float32.

    `columns` and `rows` are the ranks' values (a partial sum's summed in rank order); `token_norms` is
    None for a partial sum (norms do not add). `per_rank_columns` keeps each rank's own column sample of a
    replicated tensor (every rank must hold the same), `checksums` each rank's digest.
    """

    layer: int
    step: ScanStep
    dtype: str
    shard: Shard
    features: int
    token_norms: torch.Tensor | None
    columns: torch.Tensor
    rows: torch.Tensor
    per_rank_columns: tuple[torch.Tensor, ...]
    checksums: tuple[str, ...]
    nonfinite: int


def gather_summary(scan: Scan, layer: int, step: ScanStep | str) -> GatheredSummary | None:
    """The TP-independent summary of (layer, step), or None when the scan did not record it."""
    step = ScanStep(step)
    parts = [rank.get(layer, step) for rank in sorted(scan.ranks, key=lambda r: r.rank)]
    if any(p is None for p in parts):
        return None
    first = parts[0]
    per_rank = tuple(p.columns.float() for p in parts)
    if first.shard is Shard.PARTIAL_SUM:
        columns = torch.stack(per_rank).sum(0) if len(per_rank) > 1 else per_rank[0]
        rows = torch.stack([p.rows.float() for p in parts]).sum(0)
        norms = None
    else:
        columns, rows, norms = per_rank[0], first.rows.float(), first.token_norms.float()
    return GatheredSummary(
        layer=layer,
        step=step,
        dtype=first.dtype,
        shard=first.shard,
        features=first.features,
        token_norms=norms,
        columns=columns,
        rows=rows,
        per_rank_columns=per_rank,
        checksums=tuple(p.checksum for p in parts),
        nonfinite=sum(p.nonfinite for p in parts),
    )
