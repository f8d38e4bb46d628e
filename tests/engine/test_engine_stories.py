"""The real engine's captures through load_capture / diff_captures / explain_capture: clean layers get no
divergence and no story; each planted regression is found at its step and its story named, on every rank,
at TP1 and TP2, under both MLA backends."""

from __future__ import annotations

import pytest
from engine_tier import BACKENDS, CLEAN_LAYER, KV_B_GUARD_LAYER, O_PROJ_LAYER, TP_SIZES

import mla_debug as md
from mla_debug.explain.diff import ByteRelation, Difference, LayoutBase
from mla_debug.explain.explain import Outcome
from mla_debug.explain.stories import StoryKind
from mla_debug.explain.untestable import Untestable

PACKED = ("fused_qkv_a_proj.weight", "q_b_proj.weight", "o_proj.weight")
VNNI_READ_PLAIN = (StoryKind.WEIGHT_VNNI_READ_PLAIN,)
DERIVED_FROM_PACKED = (StoryKind.DERIVED_FROM_RELAID, StoryKind.WEIGHT_VNNI_READ_PLAIN)


def capture(engine_runs, tp, backend, layer):
    return md.load_capture(engine_runs[(tp, backend)].layer(layer))


def stories(explanation):
    return {e.step: e.story for e in explanation.explanations if e.outcome is Outcome.EXPLAINED}


@pytest.mark.parametrize("backend", BACKENDS)
def test_clean_layer_no_false_divergence_and_packed_weights_are_a_layout(engine_runs, engine_checkpoint, backend):
    ckpt = engine_checkpoint[CLEAN_LAYER]
    tp1, tp2 = (capture(engine_runs, tp, backend, CLEAN_LAYER) for tp in TP_SIZES)
    for cap in (tp1, tp2):
        assert md.diff_captures(cap, reference=True, checkpoint=ckpt).diverged_steps == []
        explanation = md.explain_capture(cap, ckpt)
        assert stories(explanation) == {}
        assert all(e.outcome in (Outcome.CORRECT_FROM_INPUTS, Outcome.UNTESTABLE) for e in explanation.explanations)
    for checkpoint in (ckpt, None):
        diff = md.diff_captures(tp1, tp2, checkpoint=checkpoint)
        assert diff.diverged_steps == []
        for name in PACKED:
            weight = diff.weight(name)
            if checkpoint is None and name != "o_proj.weight":
                continue  # replicated or column-split weights: each side's gathered bytes are a base
            # Every rank's bytes are its shard VNNI-packed: no value difference, TP1 against TP2 included.
            assert weight.difference is Difference.NONE, (name, weight)
            assert {r.relation for r in weight.ranks} == {ByteRelation.VNNI_PACKED}, (name, weight)
        if checkpoint is None:
            assert diff.weight("o_proj.weight").base is LayoutBase.SIDE_A_VNNI_UNPACKED


def test_amx_mla_says_kv_b_proj_is_untestable_naming_the_backend(engine_runs, engine_checkpoint):
    for tp in TP_SIZES:
        explanation = md.explain_capture(capture(engine_runs, tp, "AMX_MLA", CLEAN_LAYER), engine_checkpoint[CLEAN_LAYER])
        found = explanation.of("kv_b_proj")
        assert found.outcome is Outcome.UNTESTABLE and found.untestable is Untestable.NOT_RECORDED
        assert found.missing == ("kv_b_proj.weight",) and "AMX_MLA" in found.detail
        assert explanation.of("absorb_uk").outcome is Outcome.CORRECT_FROM_INPUTS


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_o_proj_reader_told_plain_is_found_and_named(engine_runs, engine_checkpoint, tp, backend):
    ckpt = engine_checkpoint[O_PROJ_LAYER]
    cap = capture(engine_runs, tp, backend, O_PROJ_LAYER)
    diff = md.diff_captures(cap, reference=True, checkpoint=ckpt)
    assert diff.first_divergent.step == "o_proj"
    assert cap.rank(0)["o_proj.weight"].attrs["_cpu_skip_gemm_dispatch"] is True  # the flag that lies
    explanation = md.explain_capture(cap, ckpt, diff=diff)
    o_proj = explanation.of("o_proj")
    assert o_proj.outcome is Outcome.EXPLAINED and o_proj.story == VNNI_READ_PLAIN
    assert o_proj.best.rel_err < 0.01 < o_proj.correct.rel_err  # W8A16 emulation: within 1%
    assert len(o_proj.best.rank_errors) in (1, tp)
    assert {h.relation for h in o_proj.held} == {ByteRelation.VNNI_PACKED}


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_kv_b_guard_dropped_w_uk_w_uv_derived_from_packed_bytes(engine_runs, engine_checkpoint, tp, backend):
    ckpt = engine_checkpoint[KV_B_GUARD_LAYER]
    cap = capture(engine_runs, tp, backend, KV_B_GUARD_LAYER)
    diff = md.diff_captures(cap, reference=True, checkpoint=ckpt)
    if backend == "AMX_MLA":
        # Prefill absorbs with the packed W_UK/W_UV: attention diverges there.
        assert diff.first_divergent.step == "attention"
    else:
        # CPU_MLA's prefill calls kv_b_proj itself (packed, read as packed): only decode uses W_UK/W_UV.
        assert diff.diverged_steps == []
        kv_b = diff.weight("kv_b_proj.weight")  # a: the reference's plain bytes, b: the engine's packed ones
        assert kv_b.difference is Difference.LAYOUT
        assert {r.relation for r in kv_b.side("b")} == {ByteRelation.VNNI_PACKED}
    explanation = md.explain_capture(cap, ckpt, diff=diff)
    for step in ("absorb_uk", "absorb_uv"):
        found = explanation.of(step)
        assert found.outcome is Outcome.EXPLAINED and found.story == DERIVED_FROM_PACKED, (step, found)
        assert len(found.best.rank_errors) == tp  # held on every rank
