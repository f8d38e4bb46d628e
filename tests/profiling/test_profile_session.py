"""md.profile on real layer runs of the tiny preset: run folders, metadata, per-rank traces, step tables."""

from __future__ import annotations

import inspect
import json
import os
import pickle
import subprocess
import sys

import pytest
import torch
from layer_steps import V3_DECODE_STEPS, V3_PREFILL_STEPS
from profiling_helpers import GEMM_STEPS

import mla_debug as md
from mla_debug.profiling import META_NAME, ProfileSession

TOKENS = 8


@pytest.fixture(scope="module")
def tiny():
    cfg = md.MLAConfig.preset("tiny")
    ckpt = md.Checkpoint.synthetic(cfg, seed=0)
    hidden = torch.randn(TOKENS, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    return cfg, ckpt, hidden, torch.arange(TOKENS)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    return tmp_path_factory.mktemp("profiles")


@pytest.fixture(scope="module")
def tp2(tiny, profiles):
    """One profiled TP2 in-process run, shared by the tests that only read it."""
    return md.profile(md.run_layer, *tiny, tp_size=2, out_dir=profiles)


@pytest.fixture(scope="module")
def tp2_distributed(tiny, profiles):
    return md.profile(md.run_layer, *tiny, tp_size=2, executor="distributed", out_dir=profiles)


def test_run_folder_holds_a_trace_and_meta(tp2, profiles):
    run, session = tp2
    assert isinstance(run, md.LayerRun) and run.tp_size == 2
    assert session.folder.parent == profiles and session.folder.is_dir()
    assert len(session.trace_paths) == 1
    assert session.trace_paths[0].name.endswith(".pt.trace.json.gz")  # tensorboard_trace_handler's naming
    meta = json.loads((session.folder / META_NAME).read_text())
    assert meta == session.metadata
    expected = {
        "model": "tiny",
        "platform": "cpu",
        "scenario": "reference",
        "tp": 2,
        "mode": "prefill",
        "tokens": TOKENS,
        "executor": "simulated",
        "function": "run_layer",
        "torch": torch.__version__,
    }
    assert {key: meta[key] for key in expected} == expected
    assert meta["python"] and meta["device"] and meta["timestamp"] and meta["error"] is None
    assert meta["trace_files"] == [session.trace_paths[0].name]


def test_every_step_found_in_order_with_shares(tp2):
    trace = tp2[1].trace()
    assert trace.steps == V3_PREFILL_STEPS
    assert trace.meta["tp"] == 2 and trace.ranks == [0]
    table = trace.per_step()
    assert list(table["step"]) == V3_PREFILL_STEPS
    assert (table["wall_us"] > 0).all() and (table["calls"] == 1).all()
    assert table["share"].sum() == pytest.approx(1.0, abs=1e-9)
    kernels = dict(zip(table["step"], table["kernel"]))
    assert kernels["q_b_proj"] == "torch-reference" and kernels["rope"] == "rope"
    assert kernels["all_reduce"] == "all_reduce" and kernels["q_a_layernorm"] == "rmsnorm"
    assert not trace.has_gpu or torch.cuda.is_available()


def test_gemm_ops_land_in_gemm_steps(tp2):
    ev = tp2[1].trace().events
    mm = ev[ev["name"] == "aten::mm"]
    assert mm["step"].notna().all()  # every GEMM runs inside a step
    per_step = mm.groupby("step").size()
    for step in GEMM_STEPS:
        assert per_step.get(step, 0) >= 1, f"no aten::mm inside {step}"
    # torch-reference runs one fp32 GEMM per call: one per rank for the column-parallel q_b_proj.
    assert per_step["q_b_proj"] == 2
    shapes = ev.loc[(ev["name"] == "aten::mm") & (ev["step"] == "q_b_proj"), "shapes"]
    assert shapes.str.startswith("[[").all()  # record_shapes kept the input dims


def test_profiling_twice_never_reuses_a_folder(tiny, profiles, tp2):
    _, again = md.profile(md.run_layer, *tiny, tp_size=2, out_dir=profiles)
    assert again.folder != tp2[1].folder and again.folder.parent == profiles
    assert tp2[1].trace_paths[0].exists()  # the first run is untouched


def test_existing_run_id_raises(tiny, profiles):
    _, session = md.profile(md.run_layer, *tiny, out_dir=profiles, run_id="fixed-id", gzip=False)
    assert session.folder.name == "fixed-id"
    assert session.trace_paths[0].name.endswith(".pt.trace.json")
    before = sorted(p.name for p in session.folder.iterdir())
    with pytest.raises(FileExistsError, match="fixed-id"):
        md.profile(md.run_layer, *tiny, out_dir=profiles, run_id="fixed-id")
    with pytest.raises(FileExistsError, match="fixed-id"):
        md.profile(out_dir=profiles, run_id="fixed-id")
    assert sorted(p.name for p in session.folder.iterdir()) == before
    with pytest.raises(ValueError, match="plain folder name"):
        md.profile(out_dir=profiles, run_id="../escape")


def test_distributed_writes_one_trace_per_rank(tp2_distributed, tp2):
    run, session = tp2_distributed
    assert run.executor == "distributed"
    assert sorted(p.name.split(".")[0] for p in session.trace_paths) == ["rank0", "rank1"]
    assert all(p.name.endswith(".pt.trace.json.gz") for p in session.trace_paths)
    assert session.metadata["executor"] == "distributed"
    trace = md.load_trace(session.folder)
    assert set(trace.events["rank"]) == {0, 1}
    per_rank = trace.per_step(by_rank=True)
    for rank in (0, 1):
        assert list(per_rank.loc[per_rank["rank"] == rank, "step"]) == V3_PREFILL_STEPS
    # The distributed executor's all-reduce is a real collective on each rank.
    reduce_ops = trace.op_table(gpu=False, step="all_reduce")["name"]
    assert reduce_ops.str.contains("allgather").any()
    # Bitwise the same layer output as the in-process run, profiled or not.
    assert torch.equal(run.records["all_reduce"].output, tp2[0].records["all_reduce"].output)


def test_compare_tp1_with_tp2(tiny, profiles, tp2):
    _, tp1 = md.profile(md.run_layer, *tiny, tp_size=1, out_dir=profiles)
    diff = md.compare_traces(tp1.folder, tp2[1].trace())
    table = diff.per_step
    assert list(table["step"]) == V3_PREFILL_STEPS
    assert table["a_us"].gt(0).all() and table["b_us"].gt(0).all()
    assert (table["delta_us"] == table["b_us"] - table["a_us"]).all()
    assert diff.level == "cpu"  # no GPU here: CPU ops are paired instead of kernels
    q = diff.per_kernel[(diff.per_kernel["step"] == "q_b_proj") & (diff.per_kernel["a_name"] == "aten::mm")].iloc[0]
    assert (q["match"], q["a_count"], q["b_count"]) == ("name", 1, 2)  # one GEMM per rank
    assert "TP1" in diff.summary() and "TP2" in diff.summary()


def test_context_manager_and_arbitrary_callables(tiny, profiles):
    cfg, ckpt, hidden, positions = tiny
    layer = md.MLALayer(cfg, ckpt, tp_size=2)
    with md.profile(out_dir=profiles, metadata={"note": "baseline"}) as session:
        layer.run(hidden, positions, mode="decode")
        session.metadata["tp"] = 2
    assert session.metadata["note"] == "baseline" and session.metadata["tp"] == 2
    assert "absorb_uk" in session.trace().steps

    result, wrapped = md.profile(lambda x: x * 2, 21, out_dir=profiles)
    assert result == 42 and wrapped.metadata["function"].endswith("<lambda>") and wrapped.trace().steps == []

    _, bound = md.profile(layer.run, hidden, positions, out_dir=profiles)
    assert (bound.metadata["model"], bound.metadata["tp"], bound.metadata["tokens"]) == ("tiny", 2, TOKENS)

    with pytest.raises(RuntimeError, match="already used"):
        with session:
            pass
    with pytest.raises(TypeError, match="no function"):
        md.profile(None, 1, out_dir=profiles)


def test_profile_takes_the_sessions_options_and_hands_the_rest_to_fn(profiles):
    shown = inspect.signature(md.profile).parameters
    session_options = [n for n in inspect.signature(ProfileSession).parameters if n != "function"]
    assert list(shown) == ["fn", "args", *session_options, "kwargs"]
    assert all(shown[n].default == inspect.signature(ProfileSession).parameters[n].default for n in session_options)
    result, session = md.profile(lambda run_id_of_fn, gzip_of_fn: (run_id_of_fn, gzip_of_fn), 1, gzip_of_fn=2,
                                 out_dir=profiles, run_id="routed", gzip=False)
    assert result == (1, 2) and session.folder == profiles / "routed" and session.gzip is False
    with pytest.raises(TypeError, match=r"got arguments for a function \(out_dr\) but no function to call; "
                       r"the session's own options are out_dir, run_id"):
        md.profile(out_dr=profiles)


def test_triage_metadata(profiles):
    result, session = md.profile(
        md.triage,
        "tiny",
        "cpu",
        "reference",
        tp_sizes=(1,),
        modes=("prefill",),
        tokens=4,
        find_culprits=False,
        progress=False,
        out_dir=profiles,
    )
    assert result.configs[0].verdict == "ok"
    meta = session.metadata
    assert (meta["model"], meta["scenario"], meta["tp"], meta["mode"], meta["tokens"]) == (
        "tiny",
        "reference",
        [1],
        ["prefill"],
        4,
    )
    assert "q_b_proj" in session.trace().steps


def test_a_failing_call_still_leaves_its_trace(profiles):
    def boom():
        with torch.profiler.record_function("mla.q_b_proj[torch-reference]"):
            torch.ones(4) @ torch.ones(4)
        raise RuntimeError("boom")

    before = set(profiles.iterdir())
    with pytest.raises(RuntimeError, match="boom"):
        md.profile(boom, out_dir=profiles)
    (folder,) = set(profiles.iterdir()) - before
    meta = json.loads((folder / META_NAME).read_text())
    assert meta["error"] == "RuntimeError: boom"
    assert md.load_trace(folder).steps == ["q_b_proj"]


def test_metadata_is_what_the_runs_inside_report(tiny, profiles):
    cfg, ckpt, hidden, positions = tiny
    with md.profile(out_dir=profiles, metadata={"mode": "as the user says"}) as session:
        md.run_layer(cfg, ckpt, hidden, positions, tp_size=1, mode="decode")
        md.run_layer(cfg, ckpt, hidden[:4], positions[:4], tp_size=2, mode="decode")
    meta = session.metadata
    # Keys on which the runs agree keep one value; keys where they differ list the values in run order.
    assert (meta["model"], meta["platform"], meta["scenario"], meta["executor"]) == (
        "tiny",
        "cpu",
        "reference",
        "simulated",
    )
    assert (meta["tp"], meta["tokens"], meta["function"]) == ([1, 2], [TOKENS, 4], None)
    assert meta["mode"] == "as the user says"  # what the caller gives wins over what the runs report
    assert [run.tp for run in session.runs] == [1, 2]
    assert session.trace().steps == V3_DECODE_STEPS


def test_a_session_observes_only_while_it_is_open(tiny, profiles):
    from mla_debug.parallel.observe import step_observers

    def kinds(executor: str) -> list[str]:
        return [type(o).__name__ for o in step_observers(executor)]

    assert kinds("simulated") == kinds("distributed") == ["ProfilerRanges"]
    with md.profile(out_dir=profiles) as session:
        assert kinds("distributed") == ["ProfilerRanges", "RankTraces"]
        assert kinds("simulated") == ["ProfilerRanges"]
    assert kinds("distributed") == ["ProfilerRanges"] and session.runs == []
    # A run after the session is neither observed nor announced to it.
    md.run_layer(*tiny)
    assert session.runs == [] and session.metadata["model"] is None


def test_step_observers_travel_to_rank_processes_by_pickle(tmp_path):
    from mla_debug.parallel.observe import ProfilerRanges
    from mla_debug.profiling.observers import RankTraces

    again = pickle.loads(pickle.dumps(RankTraces(str(tmp_path), record_shapes=False, with_cuda=False)))
    assert (again.folder, again.record_shapes, again.with_cuda) == (str(tmp_path), False, False)
    assert isinstance(pickle.loads(pickle.dumps(ProfilerRanges())), ProfilerRanges)


def test_a_distributed_run_in_a_with_block_writes_rank_traces_only(tiny, profiles):
    with md.profile(out_dir=profiles) as session:
        run = md.run_layer(*tiny, tp_size=2, executor="distributed")
    # This process only waited on its ranks: each rank's trace is the one worth having.
    assert sorted(p.name.split(".")[0] for p in session.trace_paths) == ["rank0", "rank1"]
    assert (session.metadata["executor"], session.metadata["tp"]) == ("distributed", 2)
    assert session.runs == [run.description]
    assert md.load_trace(session.folder).steps == V3_PREFILL_STEPS


def test_import_does_not_load_pandas():
    code = "import sys, mla_debug as md; md.profile, md.load_trace; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_v4_ranges_name_the_kernel_each_step_calls(profiles):
    cfg = md.MLAConfig.preset("tiny-v4")
    ckpt = md.Checkpoint.synthetic(cfg, seed=0)
    hidden = torch.randn(4, cfg.hidden_size, generator=torch.Generator().manual_seed(1))
    layer = md.MLALayer(cfg, ckpt, tp_size=2, platform="mi355x", scenario="vllm-pr51692")
    _, session = md.profile(layer.run, hidden, torch.arange(4), out_dir=profiles)
    table = session.trace().per_step()
    steps = [step.name for step in layer.ranks[0].steps("prefill")]
    assert list(table["step"]) == steps
    kernels = dict(zip(table["step"], table["kernel"]))
    # indexer_q runs the indexer's own wq_b; wo_a is the model's grouped BMM; norms are labelled.
    assert kernels["indexer_q"] == layer.kernels["indexer.wq_b"].kernel
    assert (kernels["wo_a"], kernels["q_norm"], kernels["inverse_rope"]) == ("bmm", "rmsnorm", "rope")
    # The ROCm V4 model calls the preshuffled GEMM itself for fused_wqa_wkv and wo_b.
    assert kernels["fused_wqa_wkv"] == kernels["wo_b"] == "aiter-bpreshuffle"


KINETO_START = b"USDT:2026-12-01 15:17:01 5579:5579 SyncActivityProfilerHandler.cpp:52] profiler_start\n"


def test_kineto_start_stop_lines_are_dropped_and_everything_else_kept(capfd):
    from mla_debug._stdio import without_kineto_start_stop

    with without_kineto_start_stop():
        os.write(2, KINETO_START)
        os.write(2, b"ERROR:2026-12-01 kineto failed to do something\n")
        os.write(2, KINETO_START.replace(b"start", b"stop"))
        print("a Python warning", file=sys.stderr)
    # Sorted: under pytest, Python's own writes skip descriptor 2 and may come first.
    lines = sorted(capfd.readouterr().err.splitlines())
    assert lines == ["ERROR:2026-12-01 kineto failed to do something", "a Python warning"]


def test_profiling_prints_no_kineto_start_stop_lines(tiny, tmp_path, capfd):
    with md.profile(out_dir=tmp_path):
        torch.ones(4) @ torch.ones(4)
    md.profile(md.run_layer, *tiny, tp_size=2, executor="distributed", out_dir=tmp_path)
    captured = capfd.readouterr()
    # Neither this process nor a rank (whose output is passed on as "[rank N] ...") printed a start or stop
    # line. A rank may pass on other lines of its own - gloo's threads can abort noisily at process exit
    # ("terminate called without an active exception") after the run reported - which this test is not about.
    assert "profiler_start" not in captured.err and "profiler_stop" not in captured.err


def test_a_profiler_of_the_users_own_sees_every_step_range(tiny):
    # Not only md.profile: any torch.profiler session attributes ops to steps through the ranges.
    with quiet_torch_profiler() as prof:
        md.run_layer(*tiny)
    ranges = [e.name for e in prof.events() if e.name.startswith("mla.")]
    assert [name.split("[")[0].removeprefix("mla.") for name in ranges] == V3_PREFILL_STEPS


def quiet_torch_profiler():
    from mla_debug._stdio import quiet_profiler

    return quiet_profiler(torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]))
