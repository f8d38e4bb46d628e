"""Why a step (or derived weight) of a capture could not be tested: one reason, as data.

Shared by the capture diff (a step the reference cannot compute for this capture) and the explanation (a
step the stories cannot recompute). Words are made in viz/ and the CLI.
"""

from __future__ import annotations

from enum import Enum


class Untestable(str, Enum):
    NOT_RECOMPUTED = "not_recomputed"  # an op the stories do not recompute (rope, attention, the all-reduce)
    MISSING_TENSORS = "missing_tensors"  # the capture lacks tensors the test needs (named beside it)
    KV_CONTEXT_MISSING = "kv_context_missing"  # the call attended to keys whose rows the capture lacks
    KV_CONTEXT_UNKNOWN = "kv_context_unknown"  # the capture does not say which keys its call attended to
    MULTIPLE_SEQUENCES = "multiple_sequences"  # positions repeat: rows of several sequences, which the reference would mix
    SCALE_ROWS = "scale_rows"  # a scale kept whole whose rows cannot be matched to the kept tokens
    NOT_RECORDED = "not_recorded"  # the engine holds it where the capture could not record it (detail says where)
    PER_RANK_ONLY = "per_rank_only"  # recorded per rank with no TP-independent form, so not comparable gathered
