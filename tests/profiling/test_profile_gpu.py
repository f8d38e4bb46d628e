"""md.profile on CUDA (marked gpu): Kineto's GPU kernels attributed to steps through their launches."""

from __future__ import annotations

import pytest
import torch
from layer_steps import V3_PREFILL_STEPS
from profiling_helpers import GEMM_STEPS

import mla_debug as md

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny():
    cfg = md.MLAConfig.preset("tiny")
    gen = torch.Generator().manual_seed(5)
    return cfg, md.Checkpoint.synthetic(cfg, seed=0), torch.randn(12, cfg.hidden_size, generator=gen), torch.arange(12)


CUDA_RUN = dict(tp_size=2, platform="h200", scenario="nvidia-cublas", device="cuda")


def test_cuda_kernels_follow_their_launch_into_steps(tiny, tmp_path):
    _, session = md.profile(md.run_layer, *tiny, out_dir=tmp_path, **CUDA_RUN)
    assert session.metadata["cuda_activity"] and session.metadata["device"] == torch.cuda.get_device_name(0)
    trace = session.trace()
    assert trace.has_gpu and trace.steps == V3_PREFILL_STEPS
    ev = trace.events
    kernels = ev[ev["kind"] == "kernel"]
    in_steps = kernels[kernels["step"].notna()]
    assert in_steps["correlation"].notna().all()  # attributed through the launching call
    table = trace.per_step().set_index("step")
    for step in GEMM_STEPS:
        assert table.at[step, "gpu_kernels"] >= 1 and table.at[step, "gpu_us"] > 0, step
    launches = trace.launch_counts().set_index("step")
    assert (launches["launches"] == launches["gpu_kernels"]).all()
    assert (launches.loc[list(GEMM_STEPS), "runtime_launches"] >= 1).all()
    gaps = trace.gpu_idle_gaps(min_us=0.0)
    assert (gaps["gap_us"] >= 0).all() and len(gaps) > 0
    assert not trace.op_table(gpu=True, top=5).empty


def test_nccl_ranks_each_write_a_gpu_trace(tiny, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    _, session = md.profile(md.run_layer, *tiny, executor="distributed", out_dir=tmp_path, **CUDA_RUN)
    trace = session.trace()
    assert trace.ranks == [0, 1] and trace.has_gpu
    per_rank = trace.per_step(by_rank=True)
    for rank in (0, 1):
        rows = per_rank[per_rank["rank"] == rank].set_index("step")
        assert list(rows.index) == V3_PREFILL_STEPS
        assert rows.loc[list(GEMM_STEPS), "gpu_kernels"].ge(1).all()
    # nccl's all-gather runs as a GPU kernel inside the all_reduce step.
    assert per_rank.loc[per_rank["step"] == "all_reduce", "gpu_kernels"].ge(1).all()
