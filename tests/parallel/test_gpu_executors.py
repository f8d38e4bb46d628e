"""Layer runs on CUDA (marked gpu): in-process ranks on one GPU, and one GPU per rank with nccl."""

from __future__ import annotations

import pytest
import torch

import mla_debug as md

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny():
    cfg = md.MLAConfig.preset("tiny")
    gen = torch.Generator().manual_seed(5)
    return cfg, md.Checkpoint.synthetic(cfg, seed=0), torch.randn(12, cfg.hidden_size, generator=gen), torch.arange(12)


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_cublas_layer_on_gpu_matches_cpu_reference(tiny, mode):
    cfg, ckpt, hidden, positions = tiny
    gpu = md.run_layer(
        cfg, ckpt, hidden, positions, tp_size=2, mode=mode, platform="h200", scenario="nvidia-cublas", device="cuda"
    )
    assert all(choice.kernel == "cublas-blockwise" for choice in gpu.kernels.values())
    assert gpu.output.is_cuda and not gpu.violations
    cpu = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2, mode=mode)
    # Independent activation quantization noise on each side is the same (same recipe, same bytes),
    # the remaining difference is accumulation order and bf16 rounding of partial results.
    assert md.numerics.error_metrics(gpu.output.cpu(), cpu.output)["rel_l2"] < 2e-2


def test_nccl_distributed_equals_in_process_on_gpus(tiny):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    cfg, ckpt, hidden, positions = tiny
    kwargs = dict(tp_size=2, platform="h200", scenario="nvidia-cublas", device="cuda")
    simulated = md.run_layer(cfg, ckpt, hidden, positions, **kwargs)
    distributed = md.run_layer(cfg, ckpt, hidden, positions, executor="distributed", **kwargs)
    # Same kernels on identical GPUs, all-gather + rank-order sum: bitwise identical (seen on 2x H200).
    for name in simulated.step_names:
        assert torch.equal(simulated.records[name].output.cpu(), distributed.records[name].output), name
