"""TriageReport: typed step data, patching checks, an exact JSON round trip (NaN and Inf included), and
older schemas."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import mla_debug as md
import mla_debug.triage as A
from mla_debug.cli.triage import render
from mla_debug.kernels import KernelChoice, SkippedKernel
from mla_debug.layouts import (
    LAYOUTS,
    ConsumerOrders,
    ScaleLayout,
    ScaleRead,
    ShuffleExpectation,
    ViolationKind,
    WeightLayout,
    WeightTransform,
)
from mla_debug.model.records import StepStats
from mla_debug.model.weight_recipe import WeightRecipe
from mla_debug.scenarios import AppliedRule, Engine, Resolution, SettingInEffect, SettingKind, Source
from mla_debug.triage import PatchConfirmation, PatchResult, PatchVerdict, StepRecovery
from mla_debug.triage.bisection import BisectStats
from mla_debug.triage.caveats import Caveat, CaveatKind
from mla_debug.triage.positions import TokenPositions
from mla_debug.triage.report import SCHEMA, BlockErrors, RunReport, TriageReport
from mla_debug.triage.report.legacy import choice_from_text, scale_from_text, weight_from_text

KV512 = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)


@pytest.fixture(scope="module")
def buggy():
    session = A.TriageSession(KV512, "mi355x", tokens=8)
    return A.triage(scenario="vllm-pr51692", tp_sizes=(1, 2), session=session, progress=False)


# -- typed values in the records -----------------------------------------------------------------------


def test_records_carry_layouts_and_kernel_choices_as_values(buggy):
    run = buggy.config(2, "decode").run
    kv_b = run.kernels["kv_b_proj"]
    assert isinstance(kv_b, KernelChoice) and kv_b.kernel == "aiter-bpreshuffle"
    assert "tuned row" in kv_b.reason and not kv_b.reason.startswith("aiter-bpreshuffle")
    fused = run.kernels["fused_qkv_a_proj"]
    assert fused.kernel == "aiter-blockscale" and fused.skipped[0].kernel == "aiter-bpreshuffle"
    assert not fused.skipped[0].disabled and "no bpreshuffle tuned row" in fused.skipped[0].reason

    q_b = run.records["q_b_proj"]
    assert q_b.scale_layout == ScaleRead(ScaleLayout.ROW_MAJOR, ScaleLayout.ROW_MAJOR) and not q_b.scale_layout.misread
    absorb = run.records["absorb_uk"]
    assert absorb.scale_layout is None and isinstance(absorb.weight_layout, WeightLayout)
    assert absorb.weight_layout.shuffle_count == 1 and absorb.weight_layout.shuffle_layouts == ((16, 16),)
    assert run.records["q_a_layernorm"].weight_layout is None

    step = buggy.config(2, "prefill").diff.step("kv_b_proj")
    assert step.selection == buggy.config(2, "prefill").run.kernels["kv_b_proj"]
    assert step.weight_layout.shuffle_count == 1 and step.stats.nan == 0
    assert buggy.config(2, "decode").diff.step("attention").selection is None  # no linear at this step


def test_the_words_are_made_from_the_values(buggy):
    run = buggy.config(2, "decode").run
    assert str(run.records["q_b_proj"].scale_layout) == "ROW_MAJOR written, read as ROW_MAJOR"
    assert str(ScaleRead(ScaleLayout.COL_MAJOR)) == "COL_MAJOR written"
    assert "scale ROW_MAJOR written, read as ROW_MAJOR" in run.records["q_b_proj"].summary()
    kernel, reason = md.scenario("vllm-pr51692").policy("mi355x").select("kv_b_proj", 2048, 512, "mi355x")
    assert reason == str(md.scenario("vllm-pr51692").policy("mi355x").choose("kv_b_proj", 2048, 512, "mi355x")[1])
    assert reason.startswith(f"{kernel.name}: ")
    disabled = KernelChoice("aiter-blockscale", "why", skipped=(SkippedKernel("aiter-bpreshuffle", disabled=True),))
    assert str(disabled) == "aiter-blockscale: why; skipped aiter-bpreshuffle disabled"
    assert str(KernelChoice("torch-reference", "ok", override=True)) == "torch-reference: per-layer override (ok)"


def test_a_report_has_no_tensors_and_matches_the_live_result(buggy):
    import torch

    report = buggy.report()
    assert report is buggy.report()  # made once

    def tensors(value, seen=()):
        if isinstance(value, torch.Tensor):
            return 1
        if isinstance(value, dict):
            return sum(tensors(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(tensors(v) for v in value)
        if hasattr(value, "__dataclass_fields__"):
            return sum(tensors(getattr(value, f)) for f in value.__dataclass_fields__)
        return 0

    assert tensors(report) == 0
    assert [(r.tp, r.mode, r.verdict) for r in report.runs] == [(c.tp, c.mode, c.verdict) for c in buggy.configs]
    blocks = report.blocks(2, "decode")
    live = buggy.block_errors(2, "decode")
    assert blocks.step == "absorb_uk" and (len(blocks.errors), len(blocks.errors[0])) == tuple(live.shape)
    assert all(b == pytest.approx(x, rel=1e-5) for b, x in zip(blocks.errors[3], live[3].tolist()))
    assert [b.key for b in report.block_errors] == [(1, "decode", "absorb_uk"), (2, "decode", "absorb_uk")]
    with pytest.raises(KeyError, match="no step 'absorb_uk'"):
        buggy.report(block_steps=[(1, "prefill", "absorb_uk")])


# -- JSON: an exact round trip ---------------------------------------------------------------------------

names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
numbers = st.floats(allow_nan=True, allow_infinity=True)
scale_reads = st.builds(ScaleRead, st.sampled_from(ScaleLayout), st.none() | st.sampled_from(ScaleLayout))
transforms = st.one_of(
    st.builds(WeightTransform, st.just("shuffle"), names, st.sampled_from(LAYOUTS)),
    st.builds(WeightTransform, st.just("pad_k"), names, st.none(), st.integers(1, 4096)),
)
weight_layouts = st.lists(transforms, max_size=3).map(lambda t: WeightLayout(tuple(t)))
choices = st.builds(
    KernelChoice,
    names,
    names,
    st.booleans(),
    st.lists(st.builds(SkippedKernel, names, st.booleans(), st.none() | names), max_size=2).map(tuple),
)
violations = st.builds(
    md.ContractViolation,
    st.sampled_from(ViolationKind),
    names,
    names,
    names,
    st.none()
    | st.sampled_from(ScaleLayout)
    | st.builds(ShuffleExpectation, st.none() | st.sampled_from(LAYOUTS), st.booleans()),
    st.sampled_from(ScaleLayout)
    | weight_layouts
    | st.lists(st.tuples(names, st.sampled_from(ScaleLayout)), max_size=2).map(lambda o: ConsumerOrders(tuple(o))),
    st.booleans(),
    st.none() | st.integers(1, 4096),
    st.none() | st.integers(1, 64),
)
steps = st.builds(
    A.StepDiff,
    name=names,
    kernel=st.none() | names,
    reference_kernel=st.none() | names,
    scale_layout=st.none() | scale_reads,
    weight_layout=st.none() | weight_layouts,
    violations=st.lists(violations, max_size=2),
    rel_err=numbers,
    max_abs=numbers,
    cosine=numbers,
    snr_db=numbers,
    floor=st.none() | numbers,
    threshold=st.none() | numbers,
    diverged=st.booleans(),
    classification=names,
    selection=st.none() | choices,
    stats=st.none() | st.builds(StepStats, numbers, st.integers(0, 10**6), st.integers(0, 10**6)),
)
runs = st.builds(
    RunReport,
    tp=st.sampled_from([1, 2, 4, 8]),
    mode=st.sampled_from(["prefill", "decode"]),
    verdict=st.sampled_from(["ok", "diverged"]),
    first_divergent_step=st.none() | names,
    steps=st.lists(steps, max_size=3),
    kernels=st.dictionaries(names, choices, max_size=3),
)
blocks = st.builds(
    BlockErrors,
    tp=st.integers(1, 8),
    mode=names,
    step=names,
    shape=st.lists(st.integers(1, 64), min_size=1, max_size=3).map(tuple),
    block=st.just(128),
    errors=st.integers(1, 3).flatmap(lambda n: st.lists(st.lists(numbers, min_size=n, max_size=n), max_size=3)),
)

recoveries = st.builds(
    StepRecovery,
    name=names,
    index=st.integers(0, 20),
    rel_err_before=numbers,
    rel_err_after=numbers,
    floor=st.none() | numbers,
    threshold=st.none() | numbers,
    diverged_before=st.booleans(),
    diverged_after=st.booleans(),
)


def _attempts(tp: int, mode: str):
    return st.builds(
        PatchResult,
        tp=st.just(tp),
        mode=st.just(mode),
        scenario=names,
        reference=names,
        steps=st.lists(names, min_size=1, max_size=3).map(tuple),
        verdict=st.sampled_from(PatchVerdict),
        patched=st.lists(recoveries, max_size=2).map(tuple),
        downstream=st.lists(recoveries, max_size=3).map(tuple),
        factor=st.floats(0.5, 64),
        min_threshold=st.floats(1e-6, 1),
    )


# One check per configuration, every attempt of that configuration (as triage makes them).
checks = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from(["prefill", "decode"])).flatmap(
    lambda key: st.lists(_attempts(*key), min_size=1, max_size=3).map(lambda a: (key, PatchConfirmation(tuple(a))))
)
patchings = st.lists(checks, max_size=3).map(dict)

# An engine profile's resolution, as triage records it for a scenario that is one.
_sources = st.none() | st.builds(Source, names, names, names, names)
_settings_in_effect = st.builds(SettingInEffect, names, st.sampled_from(SettingKind), names, names, _sources)
profiles = st.none() | st.builds(
    Resolution,
    names,
    st.none() | st.builds(Engine, names, names),
    st.lists(_settings_in_effect, max_size=3).map(tuple),
    st.lists(st.builds(AppliedRule, names, names, _sources), max_size=3).map(tuple),
)


# Where the tokens sat, and what the verdicts do not cover (schema 5).
positions = st.builds(TokenPositions, st.integers(0, 10**6)) | st.lists(
    st.integers(0, 10**6), min_size=1, max_size=5
).map(lambda values: TokenPositions(start=values[0], explicit=tuple(values)))
_recipes = st.none() | st.builds(
    WeightRecipe, st.sampled_from(["deepseek", "vllm"]), st.just((128, 128)), st.just("e4m3fn"), st.booleans()
)
caveat_lists = st.lists(
    st.builds(
        Caveat,
        st.sampled_from(CaveatKind),
        st.lists(names, max_size=3).map(tuple),
        st.none() | st.integers(1, 4096),
        st.none() | st.integers(1, 8192),
        _recipes,
    ),
    max_size=3,
)


def _json(data: dict) -> dict:
    # allow_nan=False: a report must be JSON any reader parses, with no NaN/Infinity literals.
    return json.loads(json.dumps(data, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(step=steps)
def test_a_step_round_trips_exactly(step):
    back = A.StepDiff.from_dict(_json(step.to_dict()))
    assert back.to_dict() == step.to_dict()
    for field in ("rel_err", "max_abs", "cosine", "snr_db"):
        a, b = getattr(step, field), getattr(back, field)
        assert (math.isnan(a) and math.isnan(b)) or a == b, field
    assert (back.scale_layout, back.weight_layout, back.selection) == (
        step.scale_layout,
        step.weight_layout,
        step.selection,
    )
    assert back.violations == step.violations


@settings(max_examples=30, deadline=None)
@given(
    run_list=st.lists(runs, max_size=3),
    block_list=st.lists(blocks, max_size=2),
    elapsed=st.none() | numbers,
    patching=patchings,
    profile=profiles,
    where=positions,
    caveats=caveat_lists,
)
def test_a_report_round_trips_exactly(buggy, run_list, block_list, elapsed, patching, profile, where, caveats):
    report = TriageReport(
        model="m",
        platform="mi355x",
        scenario="s",
        tokens=4,
        device="cpu",
        runs=run_list,
        culprits=list(buggy.culprits),
        seed=3,
        tp_sizes=(1, 2),
        modes=("prefill", "decode"),
        elapsed_s=elapsed,
        provenance=buggy.provenance,
        bisection=BisectStats(3, 2, 1, 0, 0.5),
        unresolved=[(4, "decode")],
        block_errors=block_list,
        patching=patching,
        profile=profile,
        positions=where,
        caveats=caveats,
    )
    data = _json(report.to_dict())
    back = TriageReport.from_dict(data)
    assert back.profile == profile and back.positions == where and back.caveats == caveats
    assert back.to_dict() == data
    assert list(back.patching) == list(patching)  # keyed by configuration, in the order written
    if all(not math.isnan(v) for v in _floats(report)):
        assert back == report


def _floats(report: TriageReport):
    for r in report.runs:
        for s in r.steps:
            yield from (s.rel_err, s.max_abs, s.cosine, s.snr_db)
            yield from (v for v in (s.floor, s.threshold) if v is not None)
            if s.stats is not None:
                yield s.stats.amax
    for b in report.block_errors:
        yield from (v for row in b.errors for v in row)
    for check in report.patching.values():
        for attempt in check.attempts:
            for s in attempt.patched + attempt.downstream:
                yield from (s.rel_err_before, s.rel_err_after)
                yield from (v for v in (s.floor, s.threshold) if v is not None)
    if report.elapsed_s is not None:
        yield report.elapsed_s


def test_a_report_keeps_the_patching_check_of_every_diverged_configuration(buggy):
    report = buggy.report()
    diverged = [(r.tp, r.mode) for r in report.diverged_runs]
    assert list(report.patching) == diverged == [(1, "decode"), (2, "decode")]
    assert report.patching == buggy.patching
    # A culprit is per configuration: it finds that configuration's check.
    for culprit in report.culprits:
        check = report.confirmation_of(culprit)
        assert check is buggy.patching[(culprit.tp, culprit.mode)] and check.first.steps == (culprit.step,)
    assert report.confirmation(1, "prefill") is None  # did not diverge: nothing to check
    with pytest.raises(KeyError, match="no run at TP4 decode"):
        report.confirmation(4, "decode")
    data = _json(report.to_dict())
    assert [(p["tp"], p["mode"], p["attempts"][0]["steps"]) for p in data["patching"]] == [
        (1, "decode", ["absorb_uk"]),
        (2, "decode", ["absorb_uk"]),
    ]
    assert TriageReport.from_dict(data).patching == report.patching


def test_files_without_patching_load_with_none(buggy):
    data = buggy.to_dict()
    del data["patching"], data["profile"]  # a schema 3 file written before reports kept patching
    data["schema"] = 3
    older = TriageReport.from_dict(data)
    assert older.patching == {} and older.source_schema == 3
    assert older.confirmation_of(older.culprits[0]) is None


def test_files_before_schema_5_start_at_position_0_and_recorded_no_caveats(buggy, tmp_path):
    data = buggy.to_dict()
    del data["positions"], data["caveats"]  # a schema 4 file: every triage then started at 0
    data["schema"] = 4
    data["provenance"] = {k: v for k, v in data["provenance"].items() if k != "positions"}
    older = TriageReport.from_dict(data)
    assert older.positions == TokenPositions(start=0) and older.caveats == [] and not older.caveats_recorded
    assert buggy.report().caveats_recorded and older.provenance.positions is None
    html = md.viz.render_html(older)
    assert "Caveats</h2><p>Not recorded: this report was read from a schema 4 file" in html
    assert "8 tokens at positions 0..7" in html
    console = Console(record=True, width=200)
    render(older, console)
    assert "caveats: not recorded (a schema 4 report)" in console.export_text()


def test_a_caveat_of_an_unknown_kind_is_refused_with_the_known_ones(buggy):
    data = _json(buggy.to_dict())
    data["caveats"] = [{"kind": "cosmic-rays"}]
    with pytest.raises(ValueError, match=r"Caveat.kind: 'cosmic-rays' is not one of 'indexer-not-modelled', "):
        TriageReport.from_dict(data)


def test_patching_entries_that_do_not_fit_their_configuration_say_why(buggy):
    data = _json(buggy.to_dict())
    twice = {**data, "patching": data["patching"] + data["patching"][:1]}
    with pytest.raises(ValueError, match="patching of TP1 decode: the configuration appears twice"):
        TriageReport.from_dict(twice)
    stray = {**data, "patching": [{**data["patching"][0], "tp": 2}]}
    with pytest.raises(
        ValueError, match=r"patching of TP2 decode: attempts of other configurations \[\(1, 'decode'\)\]"
    ):
        TriageReport.from_dict(stray)
    empty = {**data, "patching": [{"tp": 1, "mode": "decode", "attempts": []}]}
    with pytest.raises(ValueError, match="patching of TP1 decode: no attempts"):
        TriageReport.from_dict(empty)


def test_non_finite_numbers_are_spelled_out(buggy):
    step = buggy.config(1, "decode").diff.steps[0]
    broken = A.StepDiff(**{**step.__dict__, "rel_err": math.inf, "cosine": math.nan, "snr_db": -math.inf})
    data = broken.to_dict()
    assert (data["rel_err"], data["cosine"], data["snr_db"]) == ("inf", "nan", "-inf")
    with pytest.raises(ValueError, match="step .*: rel_err: 'infinity' is not a number"):
        A.StepDiff.from_dict({**data, "rel_err": "infinity"})


# -- files of older schemas -----------------------------------------------------------------------------


def _old_violation(v) -> dict:
    """A violation as schemas 2 to 5 wrote it: its layouts and its tensor as the sentences they were."""
    from mla_debug.viz.violations import violation_sentence

    if v.kind is ViolationKind.SCALE_ORDER:
        tensor, expected, found = f"{v.module} input scale", v.expected.name, v.found.name
    elif v.kind is ViolationKind.CONSUMERS_DISAGREE:
        tensor, expected = "q_norm output (the pre-quantized q-lora)", "one scale order for both consumers"
        found = ", ".join(f"{name} reads {layout.name}" for name, layout in v.found.orders)
    else:
        tensor, found = v.tensor, v.found.describe()
        expected = "plain bytes" if v.expected.layout is None else f"bytes shuffled once with {tuple(v.expected.layout)}"
    return {
        "kind": v.kind.value,
        "tensor": tensor,
        "consumer": v.consumer,
        "expected": expected,
        "found": found,
        "effective": v.effective,
        "message": violation_sentence(v),
    }


def _schema_2(report: TriageReport) -> dict:
    """`report` as the writer of schema 2 wrote it: layouts and kernel choices as sentences, null for
    non-finite numbers, violation messages plus their details, no block errors."""
    from mla_debug.model.program import STEP_LINEARS

    def number(x):
        return x if x is not None and math.isfinite(x) else None

    data = report.to_dict()
    data["schema"] = 2
    del data["block_errors"], data["patching"]
    data["runs"] = []
    for r in report.runs:
        kernels = {
            linear: str(choice) if not choice.is_dense else "dense (unquantized)"
            for linear, choice in r.kernels.items()
        }
        steps = []
        for s in r.steps:
            linear = STEP_LINEARS.get(s.name)
            steps.append(
                {
                    "name": s.name,
                    "kernel": s.kernel,
                    "rel_err": number(s.rel_err),
                    "violations": [_old_violation(v)["message"] for v in s.violations],
                    "reason": kernels.get(linear) if linear else None,
                    "reference_kernel": s.reference_kernel,
                    "floor": number(s.floor),
                    "threshold": number(s.threshold),
                    "diverged": s.diverged,
                    "classification": s.classification,
                    "max_abs": number(s.max_abs),
                    "cosine": number(s.cosine),
                    "snr_db": number(s.snr_db),
                    "input_layout": None,
                    "scale_layout": None if s.scale_layout is None else str(s.scale_layout),
                    "weight_layout": None if s.weight_layout is None else str(s.weight_layout),
                    "violation_details": [_old_violation(v) for v in s.violations],
                    "stats": None
                    if s.stats is None
                    else {"amax": number(s.stats.amax), "nan": s.stats.nan, "inf": s.stats.inf},
                }
            )
        data["runs"].append(
            {**{k: v for k, v in r.to_dict().items() if k != "steps"}, "kernels": kernels, "steps": steps}
        )
    return data


def test_schema_2_files_load_into_the_same_typed_values(buggy, tmp_path):
    live = buggy.report()
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_schema_2(live)))
    old = md.load_triage(path)
    assert old.source_schema == 2 and old.block_errors == [] and old.patching == {}
    for r, o in zip(live.runs, old.runs):
        # A sentence keeps the kernel and the whole line; what was skipped stays inside the reason.
        assert {k: (c.kernel, str(c)) for k, c in o.kernels.items()} == {
            k: (c.kernel, str(c)) for k, c in r.kernels.items()
        }
        for s, t in zip(r.steps, o.steps):
            assert (t.scale_layout, t.weight_layout, t.violations, t.diverged) == (
                s.scale_layout,
                s.weight_layout,
                s.violations,
                s.diverged,
            ), s.name
            if s.selection is None:
                assert t.selection is None
            else:
                assert (t.selection.kernel, str(t.selection)) == (s.selection.kernel, str(s.selection))
    assert list(old.summary["verdict"]) == list(live.summary["verdict"])
    assert [c.explanation for c in old.culprits] == [c.explanation for c in live.culprits]
    assert old.provenance == live.provenance
    with pytest.raises(KeyError, match="schema 2 file, which keeps none"):
        old.blocks(2, "decode")


def test_schema_1_files_still_load(buggy):
    data = buggy.to_dict()
    old = {key: data[key] for key in ("model", "platform", "scenario", "tokens", "device")}
    old["runs"] = [
        {
            **{k: run[k] for k in ("tp", "mode", "verdict", "first_divergent_step")},
            "steps": [
                {
                    "name": s["name"],
                    "kernel": s["kernel"],
                    "rel_err": s["rel_err"],
                    "violations": [_old_violation(md.ContractViolation.from_dict(v))["message"] for v in s["violations"]],
                }
                for s in run["steps"]
            ],
        }
        for run in data["runs"]
    ]
    old["culprits"] = [{k: c[k] for k in ("tp", "mode", "step", "change", "explanation")} for c in data["culprits"]]
    saved = TriageReport.from_dict(old)
    assert saved.source_schema == 1 and saved.provenance is None and saved.tp_sizes == (1, 2)
    assert saved.patching == {}
    assert saved.modes == ("prefill", "decode")
    assert list(saved.summary["verdict"]) == list(buggy.summary["verdict"])
    assert saved.culprits[1].explanation == buggy.culprits[1].explanation
    assert saved.to_dict()["schema"] == SCHEMA  # saving an old report writes the current schema


def test_unreadable_reports_say_why(tmp_path):
    with pytest.raises(ValueError, match="not a triage report"):
        TriageReport.from_dict({"runs": []})
    with pytest.raises(ValueError, match="schema 9 is not one this version of mla_debug reads"):
        TriageReport.from_dict({"schema": 9, "model": "m", "runs": []})
    with pytest.raises(FileNotFoundError, match="no such file"):
        md.load_triage(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        md.load_triage(bad)
    bad.write_text(json.dumps({"schema": 3, "model": "m", "runs": [{"tp": 1}]}))
    with pytest.raises(ValueError, match="bad.json: not a triage report this version can read"):
        md.load_triage(bad)
    with pytest.raises(ValueError, match="is a folder"):
        md.load_triage(tmp_path)


# -- the one place that reads the sentences of schema 2 -------------------------------------------------

who = st.text(st.sampled_from("abcdefghij-_.() 0123456789"), min_size=1, max_size=20).filter(
    lambda t: t.strip() == t and "; " not in t
)


@given(
    layout=st.lists(
        st.one_of(
            st.builds(WeightTransform, st.just("shuffle"), who, st.sampled_from(LAYOUTS)),
            st.builds(WeightTransform, st.just("pad_k"), who, st.none(), st.integers(1, 4096)),
        ),
        max_size=3,
    ).map(lambda t: WeightLayout(tuple(t)))
)
def test_weight_layout_sentences_read_back(layout):
    assert WeightLayout.from_dict(weight_from_text(str(layout), "here")) == layout


@given(read=scale_reads)
def test_scale_layout_sentences_read_back(read):
    assert ScaleRead.from_dict(scale_from_text(str(read), "here")) == read


@given(choice=st.builds(KernelChoice, who.filter(lambda t: ":" not in t), st.text(max_size=30), st.booleans()))
def test_kernel_choice_lines_read_back(choice):
    back = KernelChoice.from_dict(choice_from_text(str(choice), "here"))
    assert back.kernel == choice.kernel and str(back) == str(choice)


def test_unreadable_sentences_name_the_step():
    with pytest.raises(ValueError, match="step x: scale layout 'SIDEWAYS written'"):
        scale_from_text("SIDEWAYS written", "step x")
    with pytest.raises(ValueError, match="step x: weight layout part 'rotated'"):
        weight_from_text("rotated", "step x")
    with pytest.raises(ValueError, match="kernel choice 'no colon'"):
        choice_from_text("no colon", "step x")
    assert choice_from_text("dense (unquantized)", "here") == KernelChoice.dense().to_dict()
