"""The torch.distributed executor (gloo, one process per rank) against the in-process one."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

import mla_debug as md
from mla_debug.parallel.distributed import run_ranks_distributed


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
    with pytest.raises(RuntimeError, match=r"rank 1 failed:(.|\n)*injected failure on rank 1"):
        run_ranks_distributed(payload(tiny, fail_rank=1), world=2, timeout=120)
    assert multiprocessing.active_children() == []


def test_a_run_past_its_timeout_is_killed(tiny):
    with pytest.raises(TimeoutError, match="did not finish within"):
        run_ranks_distributed(payload(tiny), world=2, timeout=0.5)
    assert multiprocessing.active_children() == []
