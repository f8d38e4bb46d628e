"""`export_sglang_dump(capture, out)`: a capture written in SGLang 0.5.23's dumper layout, for SGLang's
own comparator (``python -m sglang.srt.debug_utils.comparator --baseline-path A --target-path B``).

Each rank's activations (and, with ``weights=True``, its linear weights) become one dump file each, named
and shaped as SGLang's non-intrusive dumper names them in SGLang's DeepSeek model (`sglang_dump_names.
export_name`; a canonical module SGLang lacks, such as transformers' separate q_a_proj, keeps its own name).
Each record carries the comparator's dims (``t h`` plus ``[tp]`` for a split feature dim, ``[tp:partial]``
for a partial sum, ``# tp:replicated`` for a replicated tensor at TP > 1) and ``sglang_parallel_info``
with the rank's tp_rank/tp_size, so the comparator can merge the shards: compare two TP sizes with
``--grouping-skip-keys rank`` (the comparator groups by the rank tag otherwise). Tensors with no
TP-independent form (PER_RANK) are not exported. Files are written once: an existing folder is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .._files import folder_atomically
from .roles import Shard, TensorRole
from .sglang_dump_names import DEFAULT_RECOMPUTE_STATUS, TAG_SEPARATOR, export_name
from .types import Capture

_EXPORTED_ROLES = (TensorRole.INPUT, TensorRole.OUTPUT)


def _dims(shard: Shard, tensor: torch.Tensor, tp_size: int) -> str | None:
    if tensor.dim() == 1:
        return None
    if tensor.dim() != 2:
        return None
    if shard is Shard.SPLIT:
        return "t h[tp]"
    if shard is Shard.PARTIAL_SUM:
        return "t h[tp:partial]"
    if shard is Shard.REPLICATED:
        return "t h # tp:replicated" if tp_size > 1 else "t h"
    return None


def _weight_dims(shard: Shard, dim: int | None, tp_size: int) -> str | None:
    if shard is Shard.SPLIT:
        return "n[tp] k" if dim == 0 else "n k[tp]"
    if shard is Shard.REPLICATED:
        return "n k # tp:replicated" if tp_size > 1 else "n k"
    return None


def export_sglang_dump(
    capture: Capture, out: str | os.PathLike, *, exp_name: str = "dump", step: int = 0, weights: bool = False
) -> Path:
    """Write `capture` under ``out/<exp_name>/`` in the dumper's layout; returns that folder."""
    folder = Path(out).expanduser() / exp_name
    layer, tp_size = capture.manifest.layer, capture.tp_size
    with folder_atomically(folder, f"SGLang dump folder {folder}") as temporary:
        for rank in sorted(capture.ranks, key=lambda r: r.rank):
            index = 0
            for name, captured in rank.tensors.items():
                if name == "positions":
                    dims, dump = None, "positions"
                elif captured.role in _EXPORTED_ROLES:
                    dims = _dims(captured.shard, captured.tensor, tp_size)
                    if dims is None:
                        continue
                    dump = export_name(name, layer)
                elif weights and captured.role is TensorRole.WEIGHT and captured.tensor.dim() == 2:
                    dims = _weight_dims(captured.shard, captured.shard_dim, tp_size)
                    if dims is None:
                        continue
                    dump = export_name(name, layer)
                else:
                    continue
                index += 1
                tags = {
                    "step": step,
                    "rank": rank.rank,
                    "dump_index": index,
                    "name": dump,
                    "recompute_status": DEFAULT_RECOMPUTE_STATUS,
                    "layer_id": layer,
                }
                meta = {
                    **tags,
                    "world_rank": rank.rank,
                    "world_size": tp_size,
                    "sglang_parallel_info": {"tp_rank": rank.rank, "tp_size": tp_size},
                    "mla_debug_name": name,
                }
                if dims is not None:
                    meta["dims"] = dims
                file = temporary / (TAG_SEPARATOR.join(f"{k}={v}" for k, v in tags.items()) + ".pt")
                torch.save({"value": captured.tensor.contiguous().clone(), "meta": meta}, file)
    return folder
