"""Whole-model scans in the real engine: every launch scans the tiny model's four decoder layers (md.scan,
through the recipe's worker extension) in the forward that records its captures, and md.compare_scans
finds the layer a planted defect starts in.

The plants (tests/engine/plugin) sit on layer 2 (kv_b_proj's guard dropped: AMX_MLA's prefill derives
W_UK/W_UV from packed bytes read plain; CPU_MLA's prefill calls kv_b_proj itself and is not hit) and layer
3 (o_proj's reader told its packed weight is plain, under both backends). The clean launch (TP1, AMX_MLA,
nothing planted) is the baseline.

The plants are not the same defect at every TP size, and the scan says so. kv_b_proj is split by rows and
its packed bands fall inside one rank's rows, so every TP2 rank holds TP1's packed rows: the same wrong
matrix at both sizes. o_proj is split by columns and each rank packs its own columns, so the plain read
gives another wrong matrix at TP2 than at TP1 (both checked on the captured bytes below): a defect that
depends on the TP size, which a scan of TP1 against TP2 should name, and does, at layer 3."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from engine_tier import BACKENDS, CLEAN, KV_B_GUARD_LAYER, MODEL_LAYERS, O_PROJ_LAYER

import mla_debug as md
from mla_debug.capture.engines import VllmCaptureExtension
from mla_debug.capture.scan_types import ScanStep, gather_summary
from mla_debug.explain.diff import Difference
from mla_debug.explain.explain import Outcome
from mla_debug.explain.scan_compare import StepOutcome
from mla_debug.explain.stories import StoryKind
from mla_debug.layouts import vnni_pack, vnni_unpack

DERIVED_FROM_PACKED = (StoryKind.DERIVED_FROM_RELAID, StoryKind.WEIGHT_VNNI_READ_PLAIN)


def compare(a, b):
    """compare_scans of two runs' scans, and its words for an assertion message."""
    comparison = md.compare_scans(a.scan, b.scan)
    return comparison, "\n".join(md.viz.scan_lines(comparison, every_step=True))


def diverged_steps(comparison, layer: int) -> list[str]:
    return [s.step.value for s in comparison.layer(layer).steps if s.outcome is StepOutcome.DIVERGED]


def test_every_launch_scans_every_layer_in_the_forward_it_captures(engine_launches):
    for launch, run in engine_launches.items():
        scan = md.capture.load_scan(run.scan)
        manifest = scan.manifest
        # The running engine's version and map (the CPU build), not the GPU release's.
        assert (manifest.engine, manifest.engine_version, manifest.map_key) == ("vllm", "0.32.0", "vllm-0.32-cpu")
        assert manifest.tp_size == launch.tp and [r.rank for r in scan.ranks] == list(range(launch.tp))
        assert manifest.layers == MODEL_LAYERS
        assert manifest.tokens == tuple(range(len(run.record["prompt"])))
        assert len(run.record["scan_folders"]) == launch.tp
        for layer in launch.layers:
            # The scan's summaries are the captured tensors' values: one forward recorded both.
            cap = md.load_capture(run.layer(layer))
            columns = list(manifest.columns)
            attention_in = gather_summary(scan, layer, ScanStep.ATTN_INPUT)
            attention_out = gather_summary(scan, layer, ScanStep.ATTN_OUTPUT)
            assert torch.equal(attention_in.columns, cap.hidden[:, columns].float()), (launch.name, layer)
            assert torch.equal(attention_out.columns, cap.gathered("o_proj.output")[:, columns].float()), (launch.name, layer)


def test_clean_against_planted_at_tp1_names_layer_2(engine_runs, clean_engine_run):
    """(a) Same TP, same backend: layers 0 and 1 are byte for byte the same; layer 2's attention output is
    the first step its input does not explain."""
    comparison, words = compare(clean_engine_run, engine_runs[(1, CLEAN.backend)])
    assert comparison.first_divergent_layer == KV_B_GUARD_LAYER, words
    assert comparison.first_divergent.step is ScanStep.ATTN_OUTPUT, words
    for layer in (0, 1):
        assert comparison.layer(layer).outcome is StepOutcome.AGREES, words
        assert all(s.rel_err == 0.0 for s in comparison.layer(layer).steps), words
    first = comparison.first_divergent
    assert first.input_err == 0.0 and first.rel_err > 10 * first.threshold, words


@pytest.mark.parametrize("backend", BACKENDS)
def test_fine_at_tp1_garbage_at_tp2_names_the_first_layer_whose_prefill_is_hit(engine_runs, clean_engine_run, backend):
    """(b) The user's case: a clean TP1 run against a planted TP2 run. Layers 0 and 1 differ by what TP2's
    sums in another order give, and are not named; the first layer named is the first the planted engine's
    prefill reads wrongly: layer 2 under AMX_MLA, layer 3 under CPU_MLA (its prefill is not hit at layer 2)."""
    comparison, words = compare(clean_engine_run, engine_runs[(2, backend)])
    expected = KV_B_GUARD_LAYER if backend == "AMX_MLA" else O_PROJ_LAYER
    assert comparison.first_divergent_layer == expected, words
    assert comparison.first_divergent.step is ScanStep.ATTN_OUTPUT, words
    for layer in range(expected):
        assert diverged_steps(comparison, layer) == [], words
    assert any(s.rel_err > 0 for s in comparison.layer(1).steps), "TP2 sums in another order: layer 1 differs"


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_plants_at_tp1_and_tp2_name_only_the_defect_that_depends_on_tp(engine_runs, backend):
    """(c) The same plants on both sides. Layers 0-2 are not named: the TP difference alone, and at layer 2
    the same wrong matrix at both sizes. Layer 3 is named: o_proj's plain read gives another wrong matrix at
    TP2 (each rank packed its own columns), which the captured bytes show."""
    tp1, tp2 = engine_runs[(1, backend)], engine_runs[(2, backend)]
    comparison, words = compare(tp1, tp2)
    for layer in (0, 1, KV_B_GUARD_LAYER):
        assert diverged_steps(comparison, layer) == [], words
    assert comparison.first_divergent_layer == O_PROJ_LAYER, words
    assert comparison.first_divergent.step is ScanStep.ATTN_OUTPUT, words

    o_proj = [md.load_capture(run.layer(O_PROJ_LAYER)) for run in (tp1, tp2)]
    full = o_proj[0].rank(0)["o_proj.weight"].tensor
    width = full.shape[1] // 2
    for rank in o_proj[1].ranks:
        held = rank["o_proj.weight"].tensor.view(torch.uint8)
        columns = slice(rank.rank * width, (rank.rank + 1) * width)
        assert torch.equal(vnni_pack(vnni_unpack(full)[:, columns].contiguous()).view(torch.uint8), held)
        assert not torch.equal(full[:, columns].contiguous().view(torch.uint8), held)  # read plain: not TP1's
    if backend == "CPU_MLA":  # kv_b_proj is kept (and packed, the guard dropped) under CPU_MLA only
        kv_b = [md.load_capture(run.layer(KV_B_GUARD_LAYER)) for run in (tp1, tp2)]
        full = kv_b[0].rank(0)["kv_b_proj.weight"].tensor
        height = full.shape[0] // 2
        for rank in kv_b[1].ranks:
            rows = full[rank.rank * height : (rank.rank + 1) * height]
            assert torch.equal(rows.contiguous().view(torch.uint8), rank["kv_b_proj.weight"].tensor.view(torch.uint8))


def test_the_suggested_capture_call_is_the_recipe_that_captured_that_layer(engine_runs, clean_engine_run):
    """The call compare_scans prints for the named layer runs as written against the recipe's worker
    extension (collective_rpc's parameters as vLLM 0.32 names them) and asks for what the engine's own
    capture of that layer recorded."""
    comparison, words = compare(clean_engine_run, engine_runs[(2, "AMX_MLA")])
    assert comparison.capture_call and all(line in words for line in comparison.capture_call.splitlines())

    class LLM:  # what the call text asks of vLLM's LLM object
        def __init__(self):
            self.calls = []

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            self.calls.append((method, dict(kwargs or {})))

        def generate(self, prompts, sampling_params=None):
            self.calls.append(("generate", sampling_params))

    llm = LLM()
    exec(comparison.capture_call, {"llm": llm, "prompts": [], "SamplingParams": dict})  # the text compare_scans wrote
    assert [method for method, _ in llm.calls] == ["mla_debug_start_capture", "generate", "mla_debug_finish_capture"]
    (_, start), (_, sampling), (_, finish) = llm.calls
    inspect.signature(VllmCaptureExtension.mla_debug_start_capture).bind(None, **start)
    inspect.signature(VllmCaptureExtension.mla_debug_finish_capture).bind(None, **finish)
    assert start["layer"] == KV_B_GUARD_LAYER and sampling == {"max_tokens": 1}
    assert Path(start["out"]).parts[0] == "captures"
    # The tokens it keeps are the rows the engine's capture of layer 2 recorded in this launch.
    assert tuple(start["tokens"]) == md.load_capture(engine_runs[(2, "AMX_MLA")].layer(KV_B_GUARD_LAYER)).manifest.tokens


def test_clean_against_planted_capture_of_layer_2_names_the_step_and_the_story(
    engine_runs, clean_engine_run, engine_checkpoint
):
    """The layer the scan named, captured whole in both launches: the diff finds the attention, with the
    same input on both sides, and the explanation tells W_UK/W_UV were derived from packed bytes read plain."""
    ckpt = engine_checkpoint[KV_B_GUARD_LAYER]
    clean = md.load_capture(clean_engine_run.layer(KV_B_GUARD_LAYER))
    planted = md.load_capture(engine_runs[(1, CLEAN.backend)].layer(KV_B_GUARD_LAYER))
    diff = md.diff_captures(clean, planted, checkpoint=ckpt)
    assert diff.layer_input.identical
    assert diff.first_divergent.step == "attention"
    assert diff.weight("W_UK").difference is diff.weight("W_UV").difference is Difference.VALUE
    assert diff.weight("o_proj.weight").difference is Difference.NONE
    explanation = md.explain_capture(planted, ckpt, diff=diff)
    for step in ("absorb_uk", "absorb_uv"):
        found = explanation.of(step)
        assert found.outcome is Outcome.EXPLAINED and found.story == DERIVED_FROM_PACKED, (step, found)
    clean_explanation = md.explain_capture(clean, ckpt)
    assert not [e.step for e in clean_explanation.explanations if e.outcome is Outcome.EXPLAINED]
    assert md.diff_captures(clean, reference=True, checkpoint=ckpt).diverged_steps == []
