"""Bisection: remedies of both kinds verified by running them, culprit groups, the known upstream fix,
and the reuse that makes it fast checked against building and searching everything afresh."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pandas as pd
import pytest
import torch

import mla_debug as md
import mla_debug.triage as A
import mla_debug.verdict as V
from mla_debug.triage.bisection import Bisector
from mla_debug.triage.report import TriageReport

KV512 = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
DISABLE_PRESHUFFLED = "VLLM_DISABLED_KERNELS=AiterPreshuffledFp8BlockScaledMMKernel"


@pytest.fixture(scope="module")
def session():
    return A.TriageSession(KV512, "mi355x", tokens=8)


@pytest.fixture(scope="module")
def buggy(session):
    return A.triage(scenario="vllm-pr51692", tp_sizes=(1, 2), session=session, progress=False)


@pytest.fixture(scope="module")
def v4():
    session = A.TriageSession("tiny-v4", "mi355x", tokens=8)
    return A.triage(scenario="vllm-pr51692", tp_sizes=(1, 8), session=session, progress=False)


def _same_record(a, b) -> None:
    assert a.name == b.name
    assert a.output.dtype == b.output.dtype and torch.equal(a.output, b.output), a.name
    assert (a.kernel, a.scale_layout, a.weight_layout) == (b.kernel, b.scale_layout, b.weight_layout)
    assert a.violations == b.violations
    assert a.notes == b.notes


@pytest.mark.parametrize("model", [KV512, "tiny-v4"], ids=["v3", "v4"])
def test_runs_that_share_layers_and_results_are_bitwise_fresh_builds(model):
    """Shared linears and remembered GEMMs change no number, no kernel text and no load history - also
    after other scenarios (model-side shuffles, honoured flags, disables) filled the caches."""
    shared = A.TriageSession(model, "mi355x", tokens=4)
    fresh = A.TriageSession(model, "mi355x", tokens=4, reuse=False)
    pr51692 = md.scenario("vllm-pr51692")
    scenarios = [
        pr51692,
        md.scenario("vllm-pr56433"),
        md.scenario("vllm-baseline"),
        replace(pr51692, name="no-preshuffled", disabled=("AiterPreshuffledFp8BlockScaledMMKernel",)),
        A.Change("honour-flags", "aiter-bpreshuffle", "").apply(pr51692),
        pr51692,  # again, now answered from the caches
    ]
    for scen in scenarios:
        for tp in (1, 2):
            for mode in ("prefill", "decode"):
                a, b = shared.run(scen, tp, mode), fresh.run(scen, tp, mode)
                assert list(a.records) == list(b.records)
                for name in a.records:
                    _same_record(a.records[name], b.records[name])
                    for x, y in zip(a.per_rank[name], b.per_rank[name]):
                        _same_record(x, y)
                assert a.kernels == b.kernels and a.events == b.events
                assert (a.scenario, a.tp_size, a.mode) == (b.scenario, b.tp_size, b.mode)


def test_bisection_with_reuse_and_pruning_finds_what_the_full_search_finds():
    """Pruning, outcome reuse and prefill/decode twins against a search that runs every candidate set."""
    for model, tp_sizes in ((KV512, (1, 2)), ("tiny-v4", (1, 8))):
        results = []
        for reuse in (True, False):
            session = A.TriageSession(model, "mi355x", tokens=4, reuse=reuse)
            results.append(A.triage(scenario="vllm-pr51692", tp_sizes=tp_sizes, session=session, progress=False))
        fast, full = results

        def found(result):  # everything but the count of trials, which pruning lowers
            return [{k: v for k, v in c.to_dict().items() if k != "trials"} for c in result.culprits]

        assert found(fast) == found(full)
        assert fast.unresolved == full.unresolved
        assert full.bisection.skipped == 0 and full.bisection.reused == 0
        assert fast.bisection.trials + fast.bisection.skipped >= full.bisection.trials
        # tiny-kv512's first set restores; tiny-v4 needs up to three changes and twins prefill/decode.
        assert fast.bisection.runs < full.bisection.runs or model == KV512


def test_skipped_sets_really_diverge_where_the_proof_says(session):
    scen = md.scenario("vllm-pr51692")
    bisector = Bisector(session, scen)
    assert bisector.bisect(2, "decode") is not None
    assert bisector.skipped, "kv_b_proj diverges at absorb_uk: changes to o_proj's kernel cannot matter there"
    for tp, mode, combo, step in bisector.skipped:
        first, _ = session.trial(A.changes.apply_all(scen, combo), tp, mode)
        assert first == step, combo


def test_the_workaround_is_a_kernel_disable_that_really_restores(buggy, session):
    culprit = buggy.culprits[1]
    assert (culprit.tp, culprit.mode) == (2, "decode")
    (workaround,) = culprit.workarounds
    assert workaround.kind is A.RemedyKind.WORKAROUND and workaround.setting == DISABLE_PRESHUFFLED
    assert workaround.changes[0].kind == "disable-kernel" and workaround.changes[0].target == "aiter-bpreshuffle"
    # What a user would write, run independently of bisection.
    user = md.scenario(
        {"name": "no-preshuffled", "base": "vllm-pr51692", "disabled": "AiterPreshuffledFp8BlockScaledMMKernel"}
    )
    assert not session.diff(user, 2, "decode").diverged
    # aiter-blockscale also ran (fused_qkv_a at TP2); disabling it does not restore, so it is not offered.
    kinds = {choice.kernel for choice in buggy.config(2, "decode").run.kernels.values()}
    assert "aiter-blockscale" in kinds
    blockscale_off = replace(md.scenario("vllm-pr51692"), name="x", disabled=("aiter-blockscale",))
    assert session.diff(blockscale_off, 2, "decode").diverged


def test_code_fixes_keep_the_headline_and_list_equally_minimal_alternatives(buggy, v4):
    culprit = buggy.culprits[0]
    assert [r.description for r in culprit.code_fixes] == ["honouring skip_weight_relayout in aiter-bpreshuffle"]
    assert culprit.code_fixes[0].changes == tuple(culprit.changes)
    tp1 = next(k for k in v4.culprits if (k.tp, k.mode) == (1, "prefill"))
    assert len(tp1.changes) == 3 and all(len(r.changes) == 3 for r in tp1.code_fixes)
    assert all(c.kind != "kernel-to-reference" for c in tp1.changes)
    assert tp1.workarounds[0].setting == DISABLE_PRESHUFFLED  # one disable instead of three code changes


def test_the_known_fix_is_run_not_assumed(session):
    fixed = A.triage(scenario="vllm-pr51692", tp_sizes=(2,), modes=("decode",), session=session, progress=False)
    assert fixed.culprits[0].known_fix == A.KnownFix("vllm-pr56433", "vLLM PR #56433", True)
    claims = md.scenario({"name": "claims-a-fix", "base": "vllm-pr51692", "fixed_by": "vllm-pr51692"})
    wrong = A.triage(scenario=claims, tp_sizes=(2,), modes=("decode",), session=session, progress=False)
    assert wrong.culprits[0].known_fix.restores is False
    from mla_debug.viz.culprits import action_lines

    (known,) = [line for line in action_lines(wrong.culprit_groups[0]) if line.label == "known fix"]
    assert known.outcome == "does NOT restore decode"
    none = md.scenario({"name": "no-fix-known", "base": "vllm-pr51692", "fixed_by": ""})
    plain = A.triage(scenario=none, tp_sizes=(2,), modes=("decode",), session=session, progress=False)
    assert plain.culprits[0].known_fix is None


def test_configs_that_fail_the_same_way_are_one_group(buggy, v4):
    (group,) = buggy.culprit_groups
    assert group.configs == ((1, "decode"), (2, "decode"))
    assert [g.configs for g in v4.culprit_groups] == [((1, "prefill"), (1, "decode")), ((8, "prefill"), (8, "decode"))]


def test_prefill_and_decode_share_trials_only_when_they_run_one_program(session, v4):
    assert session.twin_mode(2, "decode") == "decode"  # V3's absorbed decode is another program
    v4_bench = A.TriageSession("tiny-v4", "mi355x", tokens=4)
    assert v4_bench.twin_mode(8, "decode") == "prefill" and v4_bench.twin_mode(8, "prefill") == "prefill"
    by_config = {(k.tp, k.mode): k for k in v4.culprits}
    assert by_config[(8, "decode")].trials == by_config[(8, "prefill")].trials


def test_an_identical_effective_configuration_is_not_run_again(session, buggy):
    renamed = replace(md.scenario("vllm-pr51692"), name="same-under-another-name")
    again = A.triage(scenario=renamed, tp_sizes=(1, 2), session=session, progress=False)
    assert again.bisection.runs == 0 and again.bisection.reused == again.bisection.trials > 0
    assert [k.explanation for k in again.culprits] == [k.explanation for k in buggy.culprits]


def test_the_progress_bar_counts_the_trials(session, capsys):
    culprit = md.bisect(session, "vllm-pr51692", 1, "decode", progress=True)
    err = capsys.readouterr().err
    # Off a terminal, progress is whole lines; the last: "bisect TP1 decode: n/n trials (100%) done in 1.2 s".
    finals = re.findall(r"bisect TP1 decode: (\d+)/(\d+) trials \(100%\) done in", err)
    assert finals and finals[-1] == (str(culprit.trials), str(culprit.trials)) and culprit.trials > 0


def test_json_round_trips_and_loads_without_rerunning(buggy, tmp_path):
    data = json.loads(json.dumps(buggy.to_dict()))
    saved = TriageReport.from_dict(data)
    assert saved.to_dict() == data and saved == buggy.report()
    loaded = md.load_triage(buggy.to_json(tmp_path / "triage.json"))
    assert loaded.to_dict() == data
    pd.testing.assert_frame_equal(loaded.summary, buggy.summary)
    assert [g.configs for g in loaded.culprit_groups] == [g.configs for g in buggy.culprit_groups]
    culprit = loaded.culprit_groups[0].culprit
    assert culprit.workarounds[0].setting == DISABLE_PRESHUFFLED and culprit.known_fix.restores
    assert culprit.violations[0].kind is md.layouts.ViolationKind.RELAID_WEIGHT_DIRECT_READ
    table = loaded.step_table(2, "decode")
    pd.testing.assert_frame_equal(table, buggy.step_table(2, "decode"))  # one table builder for both
    assert table.set_index("step").loc["absorb_uk", "diverged"]
    assert data["culprit_groups"] == [{"configs": [[1, "decode"], [2, "decode"]], "culprits": [0, 1]}]


def test_provenance_names_weights_inputs_yardsticks_and_software(buggy, tmp_path):
    p = buggy.provenance
    assert p.weights == A.WeightsSource("synthetic", seed=0)
    assert (p.model, p.platform, p.tokens, p.seed, p.device) == ("tiny-kv512", "mi355x", 8, 0, "cpu")
    assert p.scenario == md.scenario("vllm-pr51692").to_dict()
    assert (p.divergence_factor, p.min_threshold) == (V.DIVERGENCE_FACTOR, V.MIN_THRESHOLD)
    assert p.mla_debug_version == md.__version__ and p.torch_version == torch.__version__
    assert p.tuned_table == md.kernels.TunedTable.default().source
    assert p.tuned_table_source == md.kernels.TunedTable.default().origin.to_dict()
    assert f"tuned table: {p.tuned_table}" in p.line()
    assert "synthetic, seed 0" in p.line()
    saved = tmp_path / "triage.json"
    buggy.to_json(saved)
    assert md.load_triage(saved).provenance.tuned_table_source == p.tuned_table_source

    folder = md.Checkpoint.synthetic(KV512, seed=3).save(tmp_path / "ckpt")
    from_disk = A.triage(
        scenario="reference", tp_sizes=(1,), modes=("decode",), tokens=2, checkpoint=folder, progress=False
    )
    weights = from_disk.provenance.weights
    assert weights.kind == "checkpoint" and weights.layer == 0 and weights.path == str(folder)
    assert from_disk.to_dict()["provenance"]["weights"]["path"] == str(folder)
