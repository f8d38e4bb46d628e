"""The torch.distributed executor (gloo, one process per rank) against the in-process one."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from rank_faults import CrashOnRank, FailOnRank

import mla_debug as md
from mla_debug.parallel import RankError
from mla_debug.parallel.distributed import _how_it_ended, _relay, run_ranks_distributed

REPO = Path(md.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny():
    cfg = md.MLAConfig.preset("tiny")
    gen = torch.Generator().manual_seed(5)
    return cfg, md.Checkpoint.synthetic(cfg, seed=0), torch.randn(8, cfg.hidden_size, generator=gen), torch.arange(8)


def assert_identical(a: md.LayerRun, b: md.LayerRun) -> None:
    assert a.step_names == b.step_names
    for name in a.step_names:
        ra, rb = a.records[name], b.records[name]
        assert torch.equal(ra.output, rb.output), name
        assert [str(v) for v in ra.violations] == [str(v) for v in rb.violations], name
        assert ra.kernel == rb.kernel and ra.stats == rb.stats, name
        for pa, pb in zip(a.per_rank[name], b.per_rank[name]):
            assert pa.rank == pb.rank and torch.equal(pa.output, pb.output), name
    assert a.kernels == b.kernels


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_distributed_equals_simulated_bitwise(tiny, mode):
    cfg, ckpt, hidden, positions = tiny
    kwargs = dict(tp_size=2, mode=mode, platform="mi355x", scenario="vllm-pr51692")
    simulated = md.run_layer(cfg, ckpt, hidden, positions, **kwargs)
    distributed = md.run_layer(cfg, ckpt, hidden, positions, executor="distributed", **kwargs)
    assert distributed.executor == "distributed"
    assert_identical(simulated, distributed)


def test_distributed_v4(tiny):
    cfg = md.MLAConfig.preset("tiny-v4")
    ckpt = md.Checkpoint.synthetic(cfg, seed=1)
    hidden, positions = torch.randn(6, cfg.hidden_size, generator=torch.Generator().manual_seed(0)), torch.arange(6)
    kwargs = dict(tp_size=2, platform="mi355x", scenario="vllm-pr56433")
    assert_identical(
        md.run_layer(cfg, ckpt, hidden, positions, **kwargs),
        md.run_layer(cfg, ckpt, hidden, positions, executor="distributed", **kwargs),
    )


def test_distributed_equals_simulated_under_the_engine_behaviours(tiny):
    """The load order, the absorbed-weight rules and the V3 fused producer reach every rank process."""
    cfg = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
    ckpt = md.Checkpoint.synthetic(cfg, seed=3)
    _, _, hidden, positions = tiny
    scen = md.scenario(
        {
            "base": "vllm-pr51692",
            "name": "sglang-like-remote",
            "behaviour": {
                "absorbed_weight_dtype": "fp8-per-tensor",
                "absorbed_bmm": "fp8-group-quant",
                "load_order": "remote-kv",
                "v3_fused_norm_quant": True,
                "norm_quant_backend": "torch",
            },
        }
    )
    kwargs = dict(tp_size=2, mode="decode", platform="mi355x", scenario=scen)
    simulated = md.run_layer(cfg, ckpt, hidden, positions, **kwargs)
    distributed = md.run_layer(cfg, ckpt, hidden, positions, executor="distributed", **kwargs)
    assert_identical(simulated, distributed)
    assert simulated.events == distributed.events
    assert any(event.startswith("remote-KV load") for event in distributed.events["kv_b_proj"])


def payload(tiny, **extra):
    cfg, ckpt, hidden, positions = tiny
    return dict(
        cfg=cfg,
        ckpt=ckpt,
        hidden=hidden,
        positions=positions,
        mode="prefill",
        platform=md.platform("cpu"),
        scenario=md.scenario("reference"),
        dtype=torch.bfloat16,
        device="cpu",
        **extra,
    )


def test_a_failing_rank_ends_the_run_with_its_error(tiny):
    with pytest.raises(RankError, match=r"rank 1 failed:(.|\n)*injected failure on rank 1") as caught:
        run_ranks_distributed(payload(tiny, observers=(FailOnRank(1),)), world=2, timeout=120)
    assert (caught.value.rank, caught.value.cause) == (1, "raised")
    assert multiprocessing.active_children() == []


def test_a_rank_that_dies_without_reporting_shows_its_own_output(tiny):
    with pytest.raises(RankError) as caught:
        run_ranks_distributed(payload(tiny, observers=(CrashOnRank(1),)), world=2, timeout=120)
    error = caught.value
    assert (error.rank, error.cause, error.exitcode) == (1, "died", 70)
    message = str(error)
    # Rank 0 may notice the lost peer and report its own error first; the crash stays the cause shown.
    assert re.match(
        r"rank 1 exited with code 70 before reporting( \(then rank 0 failed: .*\))?; its output:\n", message
    )
    # What it printed from Python and what it wrote straight to descriptor 2, as native code does.
    assert "rank 1 is about to crash" in message and "native message from rank 1" in message
    assert "rank 0" not in error.output  # each rank's output is its own
    assert multiprocessing.active_children() == []


def test_how_a_rank_ended_in_words():
    assert _how_it_ended(3) == "exited with code 3"
    assert _how_it_ended(-11) == "was killed by SIGSEGV"
    assert _how_it_ended(-9).startswith("was killed by SIGKILL (") and "out-of-memory" in _how_it_ended(-9)


def test_what_ranks_printed_is_passed_on_prefixed(tmp_path, capsys):
    logs = [tmp_path / "rank0.log", tmp_path / "rank1.log", tmp_path / "missing.log"]
    logs[0].write_text("")
    logs[1].write_text("a warning\nsecond line\n")
    _relay(logs)
    assert capsys.readouterr().err == "[rank 1] a warning\n[rank 1] second line\n"


SCRIPT_WITHOUT_GUARD = """\
    import torch

    import mla_debug as md

    print("top level of the script ran", flush=True)
    cfg = md.MLAConfig.preset("tiny")
    ckpt = md.Checkpoint.synthetic(cfg, seed=0)
    hidden = torch.randn(4, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    md.run_layer(cfg, ckpt, hidden, torch.arange(4), tp_size=2, executor="distributed", timeout=120)
"""


def test_a_script_without_main_guard_is_told_to_add_one(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent(SCRIPT_WITHOUT_GUARD))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    # The bound only turns a hang into a failure; the run itself ends as soon as a rank dies.
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 1, done.stderr
    err = done.stderr
    assert f"the script that called run_layer(executor='distributed') ({script}) has no " in err
    assert "`if __name__ == '__main__':` guard. Ranks start with spawn and re-import that script" in err
    assert "Put the calls under the guard:" in err and '    if __name__ == "__main__":\n        main()' in err
    assert "RankError" in err
    # The rank's own output: the script's print from its re-import, then multiprocessing's complaint.
    output = err[re.search(r"rank \d's output:\n", err).end() :]
    assert "top level of the script ran\n" in output, err
    assert "finished its bootstrapping phase" in err
    # The parent printed its own line once; the ranks' copies are in the error, not on the terminal.
    assert done.stdout.count("top level of the script ran") == 1


def test_a_run_past_its_timeout_is_killed(tiny):
    with pytest.raises(TimeoutError, match="did not finish within"):
        run_ranks_distributed(payload(tiny), world=2, timeout=0.5)
    assert multiprocessing.active_children() == []
