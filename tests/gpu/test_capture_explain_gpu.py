"""On a CUDA GPU: an FP8 engine assembled from code that is not ours - transformers' DeepSeek-V3 attention
whose linears run aiter's real Triton per-1x128 group quant and Triton block-scale GEMM (amd-aiter, loaded
by `mla_debug.real_aiter`, launched by `mla_debug.gpu.aiter_triton`) - captured at TP2 rank by rank with
`md.capture` and explained against mla_debug's FP8 emulation.

Clean, the engine stays within the FP8 noise floor of the reference run and gets no story. With a defect
planted the way aiter's producers plant it - the GEMM handed a column-major "view" scale (transposed bytes
behind row-major strides, what `transpose_scale=True` writes), which aiter's Triton GEMM reads by its
strides - the diff finds q_b_proj and the explanation names the story.

Run by benchmarks/run_gpu_checks.sh; skipped without CUDA, amd-aiter or transformers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import mla_debug as md

pytestmark = pytest.mark.gpu

# The transformers engine of the CPU tests (rank-by-rank TP, recorded by md.capture) is shared from there.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "explain"))


def _engine():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("transformers")
    from mla_debug import real_aiter

    why = real_aiter.unavailable_reason()
    if why is not None:
        pytest.skip(f"amd-aiter is not usable: {why}")
    import hf_engine

    return hf_engine


class AiterTritonLinear(torch.nn.Module):
    """A block-FP8 linear running aiter's Triton group quant and `gemm_a8w8_blockscale` on the GPU; with
    `column_major_view` its GEMM is handed the scale's transposed bytes behind row-major strides."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, column_major_view: bool = False) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight.cuda(), requires_grad=False)
        self.weight_scale_inv = torch.nn.Parameter(scale.cuda(), requires_grad=False)
        self.column_major_view = column_major_view
        self.last_input_scale: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from mla_debug.gpu import aiter_triton
        from mla_debug.real_aiter import functions

        shape = x.shape
        flat = x.reshape(-1, shape[-1]).cuda().contiguous()
        q, scale = functions.triton_group_quant("gfx950")(flat, quant_dtype=torch.float8_e4m3fn)
        m, g = scale.shape
        handed = scale.t().contiguous().view(m, g) if self.column_major_view else scale
        self.last_input_scale = handed
        y = aiter_triton.gemm_a8w8_blockscale(q, self.weight, handed, self.weight_scale_inv, arch="gfx950")
        return y.to(x.dtype).to(x.device).view(*shape[:-1], -1)


def _capture(hf_engine, weights, fp8, tokens, out: Path, defect: bool):
    def plant(module, rank, tp):
        for name in hf_engine.LINEARS:
            w, s = fp8[f"{name}.weight"], fp8[f"{name}.weight_scale_inv"]
            if name in hf_engine.COLUMN:
                w, s = w.chunk(tp, 0)[rank], s.chunk(tp, 0)[rank]
            elif name in hf_engine.ROW:
                w, s = w.chunk(tp, 1)[rank], s.chunk(tp, 1)[rank]
            view = defect and name == "q_b_proj"
            setattr(module, name, AiterTritonLinear(w.contiguous(), s.contiguous(), view))

    # md.capture writes the GPU tensors' bytes to the folder; md.load_capture reads them back on the CPU,
    # where the analysis runs.
    return hf_engine.capture(weights, 2, *tokens, out, plant=plant)


def test_aiter_triton_engine_within_fp8_noise_then_a_planted_scale_view_named(tmp_path):
    hf_engine = _engine()
    weights = hf_engine.loaded_weights(seed=0)
    fp8 = hf_engine.fp8_checkpoint(weights)
    tokens = hf_engine.inputs(tokens=16, seed=1)
    clean = _capture(hf_engine, weights, fp8, tokens, tmp_path / "clean", defect=False)
    ckpt = clean.checkpoint()
    against_reference = md.diff_captures(clean, reference=True, checkpoint=ckpt)
    assert against_reference.diverged_steps == [], against_reference.table.to_string()
    assert md.explain_capture(clean, ckpt).stories == []

    bad = _capture(hf_engine, weights, fp8, tokens, tmp_path / "bad", defect=True)
    diff = md.diff_captures(clean, bad, ckpt)
    assert diff.first_divergent.step == "q_b_proj"
    step = md.explain_capture(bad, ckpt, diff=diff).of("q_b_proj")
    assert step.outcome.value == "explained"
    assert [k.value for k in step.story] == ["act-scale-column-major-read-row-major"]
