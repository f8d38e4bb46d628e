"""``aiter-triton-blockscale`` as scenarios use it: its contract (plain weight, scales read by their
strides), selection, options, and the emulation it computes with where aiter's Triton cannot run.
aiter's own code is compared with it in tests/aiter_reference/test_gemm_vs_aiter.py."""

from __future__ import annotations

import pytest
import torch
from helpers import linear, random_tokens, random_weight

import mla_debug as md

NAME = "aiter-triton-blockscale"


def test_contract_is_aiter_blockscale_except_for_stride_reading():
    cls = md.kernels.kernel_class(NAME)
    assert cls.stands_in_for == "aiter-blockscale" and not cls.preshuffles_weight
    assert cls.act_scale_layout is md.ScaleLayout.ROW_MAJOR and not cls.wants_transposed_act_scale
    kernel = md.get_kernel(NAME)
    assert kernel.flavor == "aiter-hip" and kernel.config_as.name == "mi355x"
    with pytest.raises(ValueError, match="not one of auto, triton, emulation"):
        md.get_kernel(NAME, backend="cuda")
    with pytest.raises(ValueError, match="aiter's Triton configs exist for gfx942 .* not sm90"):
        md.get_kernel(NAME, config_as="h200")


def test_can_implement_on_gpu_platforms():
    kernel = md.get_kernel(NAME)

    def check(n, k, fmt, plat):
        return kernel.can_implement(md.kernels.GemmProblem("o_proj", n, k, fmt, md.platform(plat)))

    assert check(7168, 4096, md.E4M3FN, "h200").ok and check(7168, 4096, md.E4M3FN, "mi355x").ok
    assert "not cpu" in check(7168, 4096, md.E4M3FN, "cpu").reason
    assert "does not exist on NVIDIA" in check(128, 512, md.E4M3FNUZ, "h200").reason
    assert "K=200" in check(128, 200, md.E4M3FN, "h200").reason


@pytest.mark.parametrize(
    ("layout", "read_as", "violated"),
    [
        (md.ScaleLayout.ROW_MAJOR, md.ScaleLayout.ROW_MAJOR, False),
        (md.ScaleLayout.COL_MAJOR_STRIDED, md.ScaleLayout.COL_MAJOR_STRIDED, False),
        (md.ScaleLayout.COL_MAJOR, md.ScaleLayout.ROW_MAJOR, True),
    ],
)
def test_emulation_reads_scales_by_their_strides(layout, read_as, violated, gen):
    weight = random_weight(256, 512, gen)
    lin = linear("proj", weight, NAME)
    lin.attach(md.get_kernel(NAME, backend="emulation"))
    qa = lin.kernel.quantize_input(random_tokens(5, 512, gen), weight.fmt).presented_as(layout)
    call = lin.run(qa)
    assert call.scale_read_as is read_as and bool(call.violations) == violated
    # what it computes is the plain-weight GEMM of the scale values it reads
    reference = md.kernels.BlockScaledLinear("proj", weight).attach(md.get_kernel("aiter-blockscale"))
    as_read = md.QuantizedActivation(
        qa.data, md.layouts.read_scale(qa.scale, read_as).contiguous(), md.ScaleLayout.ROW_MAJOR, qa.fmt
    )
    assert torch.equal(call.output, reference.run(as_read).output)


def test_without_aiter_or_a_gpu_backend_auto_computes_with_the_emulation(gen, monkeypatch):
    from mla_debug.gpu import aiter_triton

    monkeypatch.setattr(aiter_triton, "unavailable_reason", lambda device, interpreter_allowed=True: "not here")
    ok, why = md.get_kernel(NAME).availability()
    assert ok and "emulation" in why and "not here" in why
    assert tuple(md.get_kernel(NAME, backend="triton").availability()) == (False, "not here")
    weight = random_weight(128, 256, gen)
    strict = linear("proj", weight, NAME)
    strict.attach(md.get_kernel(NAME, backend="triton"))
    with pytest.raises(RuntimeError, match="backend='triton' but tensors on cpu cannot run it here: not here"):
        strict(random_tokens(2, 256, gen))


def test_a_scenario_puts_it_in_the_plain_kernel_slot_and_finds_the_same_bug():
    """vLLM PR #51692 on an H200 with aiter's Triton GEMM as the plain kernel: the preshuffled stand-in
    still re-lays out kv_b_proj, so TP4 decode diverges exactly as with the Triton stand-in."""
    scen = md.scenario(
        {
            "name": "pr51692-aiter-triton",
            "base": "vllm-pr51692",
            "priority": ["triton-bpreshuffle", NAME, "torch-reference"],
        }
    )
    policy = scen.policy("h200")
    kernel, reason = policy.select("q_b_proj", 24576, 1536, "h200")  # not in the gfx950 table
    assert kernel.name == NAME and "skipped triton-bpreshuffle" in reason
    result = md.triage("mini", "h200", scen, tp_sizes=(1, 4), progress=False, device="cpu")
    assert [(c.tp, c.mode) for c in result.configs if c.verdict == "diverged"] == [(4, "decode")]
    assert [c.layer for c in result.culprits] == ["kv_b_proj"]
