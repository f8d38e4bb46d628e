"""Which layers today's engines route to which aiter backend: the ``selection`` options of
aiter-triton-blockscale and aiter-bpreshuffle (vLLM 0.33's probes, SGLang 0.5.23's hard-coded shapes), the
gfx1250 preshuffle backend, and what the layer flags do at load."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import random_weight

import mla_debug as md
from mla_debug.kernels.engine_rules import SGLANG_TRITON_SHAPES
from mla_debug.kernels.triton_configs import TritonConfigTable

EMBEDDED = md.kernels.TunedTable.embedded()


def preshuffle_configs(tmp_path, *shapes) -> TritonConfigTable:
    """A folder with gfx1250 GEMM-A8W8_BLOCKSCALE_PRESHUFFLED configs tuned for small M, as a newer aiter ships."""
    for n, k in shapes:
        (tmp_path / f"gfx1250-GEMM-A8W8_BLOCKSCALE_PRESHUFFLED-N={n}-K={k}.json").write_text(
            json.dumps({"M_LEQ_4": {}, "any": {}})
        )
    return TritonConfigTable.from_folder(tmp_path)


def choose(kernel: str, n: int, k: int, plat: str, configs=None, **options):
    policy = md.KernelPolicy(
        [kernel, "torch-reference"], tuned=EMBEDDED, triton_configs=configs, kernel_options={kernel: options}
    )
    return policy.choose("proj", n, k, plat)[1]


# -- aiter-triton-blockscale ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plat", "n", "k", "taken"),
    [
        ("mi355x", 2112, 7168, True),  # MI350X-GEMM-A8W8_BLOCKSCALE-N=2112-K=7168.json in the pinned release
        ("mi355x", 24576, 1536, False),  # no config: vLLM keeps CK
        ("mi300x", 2112, 7168, False),  # fnuz: never aiter's Triton backend in vLLM 0.33
        ("gfx1250", 24576, 1536, True),  # gfx1250: every layer not preshuffled
    ],
)
def test_vllm_033_routes_to_aiters_triton_gemm_by_config_or_gfx1250(plat, n, k, taken):
    choice = choose("aiter-triton-blockscale", n, k, plat, selection="vllm-0.33")
    assert (choice.kernel == "aiter-triton-blockscale") is taken
    reason = choice.reason if taken else choice.skipped[0].reason
    assert "vLLM 0.33.0 scaled_mm/aiter.py AiterFp8BlockScaledMMKernel" in reason


def test_vllm_033_probe_uses_the_policys_config_table(tmp_path):
    (tmp_path / "gfx950-GEMM-A8W8_BLOCKSCALE-N=24576-K=1536.json").write_text('{"M_LEQ_256": {}}')
    configs = TritonConfigTable.from_folder(tmp_path)
    choice = choose("aiter-triton-blockscale", 24576, 1536, "mi355x", configs, selection="vllm-0.33")
    assert choice.kernel == "aiter-triton-blockscale" and "at the probe M=128" in choice.reason
    (tmp_path / "gfx950-GEMM-A8W8_BLOCKSCALE-N=24576-K=1536.json").write_text('{"M_LEQ_64": {}}')
    small_m_only = TritonConfigTable.from_folder(tmp_path)
    assert choose("aiter-triton-blockscale", 24576, 1536, "mi355x", small_m_only, selection="vllm-0.33").kernel == (
        "torch-reference"
    )


def test_sglang_routes_only_its_hard_coded_shapes_to_triton_on_gfx95():
    assert len(SGLANG_TRITON_SHAPES) == 13
    for n, k in SGLANG_TRITON_SHAPES:
        assert choose("aiter-triton-blockscale", n, k, "mi355x", selection="sglang-0.5.23").kernel == (
            "aiter-triton-blockscale"
        )
    assert choose("aiter-triton-blockscale", 24576, 1536, "mi355x", selection="sglang-0.5.23").kernel == (
        "torch-reference"
    )
    assert choose("aiter-triton-blockscale", 2112, 7168, "mi300x", selection="sglang-0.5.23").kernel == (
        "torch-reference"
    )
    # On NVIDIA the rule applies as on the ROCm card the kernel takes its configs from.
    on_h200 = choose("aiter-triton-blockscale", 2112, 7168, "h200", selection="sglang-0.5.23")
    assert on_h200.kernel == "aiter-triton-blockscale" and "(selection as on mi355x)" in on_h200.reason


def test_selection_any_is_todays_rule_and_bad_names_are_refused():
    assert md.get_kernel("aiter-triton-blockscale").selection == "any"
    assert choose("aiter-triton-blockscale", 24576, 1536, "mi300x").kernel == "aiter-triton-blockscale"
    with pytest.raises(ValueError, match="selection .vllm. is not one of any, vllm-0.33, sglang-0.5.23"):
        md.get_kernel("aiter-triton-blockscale", selection="vllm")


# -- aiter-bpreshuffle under SGLang --------------------------------------------------------------------


def test_sglang_shuffles_every_other_block_fp8_linear_on_gfx95():
    assert md.get_kernel("aiter-bpreshuffle").selection == "tuned-row"
    kv_b = choose("aiter-bpreshuffle", 4096, 512, "mi355x", selection="sglang-0.5.23")  # no tuned row needed
    assert kv_b.kernel == "aiter-bpreshuffle" and "gemm_a8w8_blockscale_bpreshuffle" in kv_b.reason
    assert choose("aiter-bpreshuffle", 3072, 1536, "mi355x", selection="sglang-0.5.23").kernel == "torch-reference"
    assert choose("aiter-bpreshuffle", 4096, 512, "mi300x", selection="sglang-0.5.23").kernel == "torch-reference"
    # The Triton stand-in takes the same option and applies it as on its ROCm card.
    assert choose("triton-bpreshuffle", 4096, 512, "h200", selection="sglang-0.5.23").kernel == "triton-bpreshuffle"


@pytest.mark.parametrize("selection", ["tuned-row", "sglang-0.5.23"])
def test_a_kernel_that_shuffles_sets_aiter_bpreshuffled(gen, selection):
    weight = random_weight(256, 512, gen)
    linear = md.kernels.BlockScaledLinear("proj", weight)
    linear.attach(md.get_kernel("aiter-bpreshuffle", selection=selection, honour_layer_flags=False))
    assert linear.aiter_bpreshuffled and linear.weight.layout.shuffle_count == 1
    model_shuffled = md.kernels.BlockScaledLinear("proj", weight)
    model_shuffled.shuffle_weight((16, 16), by="model")
    assert not model_shuffled.aiter_bpreshuffled  # only a kernel's load-time shuffle sets it


def test_sglang_honours_only_keep_plain_weight_layout(gen):
    weight = random_weight(256, 512, gen)
    kernel = md.get_kernel("aiter-bpreshuffle", selection="sglang-0.5.23")
    kept = md.kernels.BlockScaledLinear("wo_a", weight, is_bmm=True, keep_plain_weight_layout=True).attach(kernel)
    assert kept.weight.layout.plain and not kept.aiter_bpreshuffled and not kept.plain_fallback
    assert "keep_plain_weight_layout" in kept.events[-1]
    # A call through the kernel would still run the preshuffled GEMM on the plain weight: recorded.
    call = kept.run(torch.randn(3, 512).to(torch.bfloat16))
    assert [v.kind for v in call.violations] == [md.layouts.ViolationKind.WEIGHT_LAYOUT_MISMATCH]
    # vLLM's flags mean nothing to SGLang: kv_b_proj is shuffled under MLA.
    kv_b = md.kernels.BlockScaledLinear("kv_b_proj", weight, skip_weight_relayout=True)
    kv_b.attach(md.get_kernel("aiter-bpreshuffle", selection="sglang-0.5.23", honour_layer_flags=True))
    assert kv_b.aiter_bpreshuffled and kv_b.weight.layout.shuffle_count == 1


def test_vllm_kernels_do_not_read_keep_plain_weight_layout(gen):
    weight = random_weight(256, 512, gen)
    linear = md.kernels.BlockScaledLinear("proj", weight, keep_plain_weight_layout=True)
    linear.attach(md.get_kernel("aiter-bpreshuffle", honour_layer_flags=True))
    assert linear.aiter_bpreshuffled and not linear.reads_weight_directly
    assert linear.layer_flags == ["keep_plain_weight_layout"] and "keep_plain_weight_layout" in repr(linear)


def test_deepseek_v4_wo_a_carries_both_engines_flags():
    from mla_debug.parallel.sharding import V4_LINEARS

    wo_a = next(spec for spec in V4_LINEARS if spec.name == "wo_a")
    assert wo_a.flags == {"is_bmm": True, "keep_plain_weight_layout": True}


# -- aiter-triton-bpreshuffle --------------------------------------------------------------------------


def test_the_gfx1250_preshuffle_needs_a_tuned_preshuffle_config(tmp_path):
    default = choose("aiter-triton-bpreshuffle", 4096, 512, "gfx1250")
    assert default.kernel == "torch-reference"
    assert "has no tuned gfx1250-GEMM-A8W8_BLOCKSCALE_PRESHUFFLED-N=4096-K=512.json at the probe M=1" in (
        default.skipped[0].reason
    )
    configs = preshuffle_configs(tmp_path, (4096, 512))
    taken = choose("aiter-triton-bpreshuffle", 4096, 512, "gfx1250", configs)
    assert taken.kernel == "aiter-triton-bpreshuffle" and "use_bpreshuffle" in taken.reason
    assert choose("aiter-triton-bpreshuffle", 4096, 512, "mi355x", configs).kernel == "torch-reference"
    assert "N % 16 == 0" in choose("aiter-triton-bpreshuffle", 4104, 512, "gfx1250", configs).skipped[0].reason


def test_released_preshuffle_honours_only_is_bmm(gen):
    weight = random_weight(256, 512, gen)
    kernel = md.get_kernel("aiter-triton-bpreshuffle")
    kv_b = md.kernels.BlockScaledLinear("kv_b_proj", weight, skip_weight_relayout=True).attach(kernel)
    assert kv_b.aiter_bpreshuffled and kv_b.weight.layout.shuffle_count == 1  # defect 4 on gfx1250
    wo_a = md.kernels.BlockScaledLinear("wo_a", weight, is_bmm=True, keep_plain_weight_layout=True)
    wo_a.attach(md.get_kernel("aiter-triton-bpreshuffle"))
    assert wo_a.plain_fallback and wo_a.weight.layout.plain and "honours is_bmm" in wo_a.events[-1]
    # honour_layer_flags=True honours every vLLM direct-read flag (what bisection proposes).
    fixed = md.kernels.BlockScaledLinear("kv_b_proj", weight, skip_weight_relayout=True)
    fixed.attach(md.get_kernel("aiter-triton-bpreshuffle", honour_layer_flags=True))
    assert fixed.plain_fallback and not fixed.aiter_bpreshuffled
    # The kernel's own choice of layout, is_bmm reset (DeepSeek-V4.1 on ROCm): shuffled.
    reset = md.kernels.BlockScaledLinear("wo_a", weight, is_bmm=False).attach(md.get_kernel("aiter-triton-bpreshuffle"))
    assert reset.aiter_bpreshuffled
