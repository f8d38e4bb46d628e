"""The keys a captured call attends to beyond its kept rows, and the call's mode, as the recorder sees them.

Attention makes each row depend on the keys of every earlier position of its sequence. A capture keeps the
chosen rows of one call; a reference recomputing that call needs the other keys too: the rows of the same
call left out by `tokens=`, and (in a decode call) the rows of the earlier calls that filled the KV cache.
Both are layer-input rows the recorder sees at the attention module's pre-hook, so it keeps them, with
their positions, as ``context.input`` (rows, H) and ``context.positions`` (rows,); the reference then
recomputes the keys from them the way it computes the kept rows' own.

Positions alone say what a row needs: within one sequence, every position from 0 to its own. A call whose
rows hold all of them needed nothing cached (a prefill); one that needed positions it does not hold read
them from a KV cache (a decode call). That is the mode the recorder writes when none is given.
"""

from __future__ import annotations

import torch

CONTEXT_INPUT, CONTEXT_POSITIONS = "context.input", "context.positions"


def needed_positions(kept: list[int]) -> set[int]:
    """Every key position the kept rows attend to, for rows of one sequence (causal attention)."""
    return set(range(max(kept) + 1)) if kept else set()


def inferred_mode(kept: list[int], call_positions: list[int]) -> str:
    """"prefill" when the call's own rows hold every key its kept rows attend to, else "decode"."""
    return "prefill" if needed_positions(kept) <= set(call_positions) else "decode"


def key_positions(kept: list[int], call_positions: list[int], mode: str | None = None) -> list[int]:
    """The positions of the keys the kept rows attend to: the call's rows up to the last kept position,
    and in a decode call (`mode`, else the one the positions show) every earlier position of the
    sequence, read from the KV cache. A call said to be a prefill holds all its keys, wherever its
    positions start."""
    horizon = max(kept)
    keys = {p for p in call_positions if p <= horizon}
    if (mode or inferred_mode(kept, call_positions)) == "decode":
        keys |= needed_positions(kept)
    return sorted(keys)


class ContextRows:
    """Layer-input rows with their positions, gathered over the calls of one attention module."""

    def __init__(self) -> None:
        self.rows: list[torch.Tensor] = []
        self.positions: list[torch.Tensor] = []
        self.unknown = False  # a call whose rows or positions could not be read

    def add(self, hidden: torch.Tensor | None, positions: torch.Tensor | None, width: int) -> None:
        """Keep a call's rows (`hidden` (..., width)) at `positions` (one per row); remember a call it
        could not read, so the context is known to be incomplete."""
        if hidden is None or positions is None or hidden.shape[-1] != width:
            self.unknown = True
            return
        rows = hidden.detach().reshape(-1, width)
        flat = positions.detach().reshape(-1)
        if flat.numel() != rows.shape[0]:
            self.unknown = True
            return
        self.rows.append(rows.to("cpu", copy=True))
        self.positions.append(flat.to("cpu", torch.long, copy=True))

    def up_to(self, horizon: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(rows, positions) of the kept calls' rows at positions <= `horizon`, or None when none is."""
        if not self.rows:
            return None
        rows, positions = torch.cat(self.rows), torch.cat(self.positions)
        wanted = positions <= horizon
        if not bool(wanted.any()):
            return None
        return rows[wanted].contiguous(), positions[wanted].contiguous()


def rows_by_position(rows: torch.Tensor, call_positions: list[int] | None) -> torch.Tensor | None:
    """An op's rows taken at the call's positions, when the op ran over one sequence's whole KV cache
    (row i holds position i); None when its rows cannot be matched to the call's that way.

    transformers 5.25.0, models/deepseek_v3/modeling_deepseek_v3.py: DeepseekV3Attention.forward caches
    the compressed latent (`cache.update(kv_nope, k_rot, ...)`, l.444) and `expand_kv` then runs
    kv_b_proj over every cached row (l.400), the new ones appended last."""
    if not call_positions or len(set(call_positions)) != len(call_positions):
        return None
    if rows.shape[0] != max(call_positions) + 1:
        return None
    return rows[list(call_positions)]
