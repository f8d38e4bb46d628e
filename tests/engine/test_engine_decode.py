"""A decode step captured inside the real engine: the capture is opened before the prompt's forward and
records the layer's second call (vLLM's first decode step), keeping the prompt's rows as the KV context the
step attends to. The reference then attends over the same keys the engine's cache held, so a clean decode
step agrees, attention included, and the mode is the one the positions show."""

from __future__ import annotations

import torch
from engine_tier import CLEAN, KV_B_GUARD_LAYER

import mla_debug as md
from mla_debug.capture.context import CONTEXT_INPUT, CONTEXT_POSITIONS
from mla_debug.explain.diff import StepStatus
from mla_debug.explain.explain import Outcome

LAYER = KV_B_GUARD_LAYER  # clean in this launch: nothing is planted


def test_a_clean_decode_step_is_recorded_with_its_context_and_agrees(clean_engine_run, engine_checkpoint):
    assert LAYER in CLEAN.decode_layers
    prompt = clean_engine_run.record["prompt"]
    assert len(clean_engine_run.record["tokens"]) == 2  # the prompt's forward, then one decode step
    decode = md.load_capture(clean_engine_run.decode(LAYER))
    prefill = md.load_capture(clean_engine_run.layer(LAYER))
    assert decode.manifest.mode == "decode" and prefill.manifest.mode == "prefill"
    assert decode.manifest.positions == (len(prompt),)  # the first generated token's position
    rank = decode.rank(0)
    assert rank[CONTEXT_POSITIONS].tensor.tolist() == list(range(len(prompt)))
    # The context rows are the prompt forward's layer inputs: copies of what the prefill capture recorded.
    assert torch.equal(rank[CONTEXT_INPUT].tensor, prefill.rank(0)["layer.input"].tensor)

    ckpt = engine_checkpoint[LAYER]
    diff = md.diff_captures(decode, reference=True, checkpoint=ckpt)
    assert diff.diverged_steps == []
    attention = next(step for step in diff.steps if step.step == "attention")
    assert attention.status is StepStatus.COMPARED  # judged against the reference's attention over the context
    explanation = md.explain_capture(decode, ckpt, diff=diff)
    assert not [e for e in explanation.explanations if e.outcome is Outcome.EXPLAINED]
    assert explanation.of("absorb_uk").outcome is Outcome.CORRECT_FROM_INPUTS  # decode's absorbed path
