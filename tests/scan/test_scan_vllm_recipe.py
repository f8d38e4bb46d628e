"""The vLLM scan recipe on a module tree shaped as vLLM 0.32/0.33's DeepSeek-V2 decoder layers (the real
engine runs in the engine tier): layers called as (positions, hidden_states, residual) that return the
(hidden_states, residual) pair and update their arguments in place the way vLLM's fused add-norm does.
The scan must summarize the stream hidden_states + residual as it was when the layer was called."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import mla_debug as md
from mla_debug.capture import ScanStep
from mla_debug.capture.scan import checksum
from mla_debug.capture.scan_engines import vllm_finish_scan, vllm_start_scan

H, TOKENS, LAYERS = 64, 5, 3


class DeepseekV2MLAAttention(nn.Module):  # the class name the vLLM name map knows
    def __init__(self) -> None:
        super().__init__()
        self.o_proj = nn.Linear(H, H, bias=False)

    def forward(self, positions, hidden_states, llama_4_scaling=None):
        return self.o_proj(torch.tanh(hidden_states))


class FusedAddNorm(nn.Module):
    """vLLM's RMSNorm(x, residual): residual += x and x = norm(residual), both in place."""

    def forward(self, x, residual=None):
        if residual is None:
            return x / x.norm(dim=-1, keepdim=True)
        residual.add_(x)
        x.copy_(residual / residual.norm(dim=-1, keepdim=True))
        return x, residual


class DecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.self_attn, self.mlp = FusedAddNorm(), DeepseekV2MLAAttention(), nn.Linear(H, H)

    def forward(self, positions, hidden_states, residual):
        if residual is None:
            residual = hidden_states.clone()
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions, hidden_states)
        residual = residual + hidden_states
        return self.mlp(residual), residual


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = nn.Module()
        self.model.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))

    def forward(self, hidden, positions, streams=None):
        residual = None
        for layer in self.model.layers:
            if streams is not None:
                streams.append(hidden.clone() if residual is None else hidden + residual)
            hidden, residual = layer(positions, hidden, residual)
        return hidden, residual


def worker_for(model, rank=0, tp_size=1):
    return SimpleNamespace(
        rank=rank,
        parallel_config=SimpleNamespace(tensor_parallel_size=tp_size, pipeline_parallel_size=1),
        model_runner=SimpleNamespace(get_model=lambda: model),
    )


def test_the_vllm_recipe_scans_the_stream_hidden_plus_residual_before_the_in_place_norm(tmp_path):
    model, worker = Model(), None
    worker = worker_for(model)
    planned = vllm_start_scan(worker, str(tmp_path / "scan"), note="fake vLLM")
    streams: list[torch.Tensor] = []
    with torch.no_grad():
        hidden, residual = model(torch.randn(TOKENS, H), torch.arange(TOKENS), streams)
    written = vllm_finish_scan(worker)
    assert written == planned == str(tmp_path / "scan" / "rank0-of-1")
    scan = md.capture.load_scan(tmp_path / "scan")
    assert scan.manifest.engine == "vllm" and scan.manifest.map_key == "vllm-0.33"
    for layer in range(LAYERS):
        summary = scan.rank(0).get(layer, ScanStep.LAYER_INPUT)
        assert summary.checksum == checksum(streams[layer].float()), layer
        assert torch.equal(summary.columns, streams[layer].float()[:, list(scan.manifest.columns)])
    last = scan.rank(0).get(LAYERS - 1, ScanStep.LAYER_OUTPUT)
    assert last.checksum == checksum(hidden + residual)


def test_a_second_start_and_a_finish_without_start_are_refused(tmp_path):
    worker = worker_for(Model())
    with pytest.raises(RuntimeError, match="no scan is open"):
        vllm_finish_scan(worker)
    vllm_start_scan(worker, str(tmp_path / "s"))
    with pytest.raises(RuntimeError, match="already open"):
        vllm_start_scan(worker, str(tmp_path / "t"))


def test_two_ranks_write_their_own_folders(tmp_path):
    model = Model()
    for rank in (0, 1):
        worker = worker_for(model, rank, 2)
        vllm_start_scan(worker, str(tmp_path / "tp2"))
        with torch.no_grad():
            model(torch.ones(TOKENS, H), torch.arange(TOKENS))
        vllm_finish_scan(worker)
    scan = md.capture.load_scan(tmp_path / "tp2")
    assert [r.rank for r in scan.ranks] == [0, 1] and scan.tp_size == 2
