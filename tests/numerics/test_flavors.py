"""Quantization flavors: the per-recipe constants and how aiter and vLLM scales relate on fnuz."""

from __future__ import annotations

import math

import pytest
import torch
from fp8_oracle import FLAVOR_NAMES, f32, fmt_max

from mla_debug.numerics import (
    AITER,
    DEEPSEEK,
    E4M3FN,
    E4M3FNUZ,
    FLAVORS,
    VLLM,
    QuantFlavor,
    block_quantize,
    group_quantize,
    quant_flavor,
)


@pytest.mark.parametrize(
    ("flavor", "fmt", "expected"),
    [
        (AITER, E4M3FN, 448.0),
        (AITER, E4M3FNUZ, 240.0),
        (VLLM, E4M3FN, 448.0),
        (VLLM, E4M3FNUZ, 224.0),
        (DEEPSEEK, E4M3FN, 448.0),
        (DEEPSEEK, E4M3FNUZ, 448.0),
    ],
)
def test_fmt_max(flavor, fmt, expected):
    assert flavor.fmt_max(fmt) == expected
    assert fmt_max(flavor.name, fmt.dtype) == expected  # the test oracle agrees


def test_recipe_constants():
    assert (AITER.group_amax_floor, AITER.block_amax_floor, AITER.quotient, AITER.clamp) == (
        1e-10,
        1e-10,
        "mul_reciprocal",
        True,
    )
    assert (VLLM.group_amax_floor, VLLM.block_amax_floor, VLLM.quotient, VLLM.clamp) == (1e-10, 1e-12, "div", True)
    assert (DEEPSEEK.group_amax_floor, DEEPSEEK.block_amax_floor, DEEPSEEK.quotient, DEEPSEEK.clamp) == (
        1e-4,
        1e-4,
        "mul_reciprocal",
        False,
    )
    assert {name: FLAVORS[name] for name in ("aiter", "vllm", "deepseek")} == {
        "aiter": AITER,
        "vllm": VLLM,
        "deepseek": DEEPSEEK,
    }
    engine = {"vllm-native", "vllm-triton", "vllm-cuda", "sglang-triton", "sglang-triton-colmajor", "deepgemm", "flashinfer-sm90"}
    assert (
        set(FLAVORS)
        == {"aiter", "aiter-hip", "aiter-triton", "aiter-fused", "aiter-torch", "vllm", "deepseek"} | engine
    )


@pytest.mark.parametrize("name", FLAVOR_NAMES)
def test_quant_flavor_lookup(name):
    assert quant_flavor(name) is FLAVORS[name]
    assert quant_flavor(name.upper()) is FLAVORS[name]
    assert quant_flavor(FLAVORS[name]) is FLAVORS[name]


def test_quant_flavor_passes_custom_flavor_through():
    custom = QuantFlavor("mine", "test", 1e-6, 1e-6, "div", True, fixed_max=100.0)
    assert quant_flavor(custom) is custom
    assert custom.fmt_max(E4M3FN) == 100.0 and custom.fmt_max(E4M3FNUZ) == 100.0


@pytest.mark.parametrize("bad", ["sglang", "", 3, None])
def test_quant_flavor_unknown_lists_valid_names(bad):
    with pytest.raises(ValueError) as info:
        quant_flavor(bad)
    message = str(info.value)
    for name in FLAVOR_NAMES:
        assert name in message
    assert repr(bad) in message


def test_quantizers_reject_unknown_flavor_and_format():
    x = torch.ones(1, 128)
    with pytest.raises(ValueError, match="aiter"):
        group_quantize(x, flavor="nope")
    with pytest.raises(ValueError, match="e4m3fnuz"):
        group_quantize(x, fmt="e5m2")
    with pytest.raises(ValueError, match="vllm"):
        block_quantize(x, flavor="nope")


def _varied_groups(rows: int, groups: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    magnitudes = torch.exp2(torch.randint(-30, 30, (rows, groups, 1), generator=gen).float())
    x = torch.randn(rows, groups, 128, generator=gen) * magnitudes
    return x.reshape(rows, groups * 128)


def test_aiter_and_vllm_group_scales_on_fnuz_differ_by_240_over_224():
    x = _varied_groups(16, 4, seed=11)
    _, s_aiter, _ = group_quantize(x, fmt="fnuz", flavor="aiter")
    _, s_vllm, _ = group_quantize(x, fmt="fnuz", flavor="vllm")
    # both floors are 1e-10, far below these groups' amax
    amax = x.reshape(16, 4, 128).abs().amax(-1).double()
    assert torch.equal(s_aiter, f32(amax / 240.0).float())
    assert torch.equal(s_vllm, f32(amax / 224.0).float())
    # Each scale is one correctly rounded fp32 division of the same amax, so their ratio is 240/224 up
    # to two fp32 roundings: |ratio / (240/224) - 1| <= 2 * 2^-24 (+ a float64 ulp for the check itself).
    ratio = s_vllm.double() / s_aiter.double()
    assert ((ratio / (240.0 / 224.0) - 1).abs() <= 2 * 2.0**-24 + 2.0**-50).all()
    assert (s_vllm > s_aiter).all()


def test_aiter_and_vllm_group_scales_equal_on_fn():
    x = _varied_groups(8, 3, seed=12)
    _, s_aiter, _ = group_quantize(x, fmt="fn", flavor="aiter")
    _, s_vllm, _ = group_quantize(x, fmt="fn", flavor="vllm")
    assert torch.equal(s_aiter, s_vllm)


def test_aiter_and_vllm_block_scales_on_fnuz():
    gen = torch.Generator().manual_seed(13)
    w = torch.randn(256, 384, generator=gen) * 0.02
    _, s_aiter, _ = block_quantize(w, fmt="fnuz", flavor="aiter")
    _, s_vllm, _ = block_quantize(w, fmt="fnuz", flavor="vllm")
    amax = w.reshape(2, 128, 3, 128).abs().amax(dim=(1, 3)).double()
    assert torch.equal(s_aiter, f32(amax / 240.0).float())
    assert torch.equal(s_vllm, f32(amax / 224.0).float())


def test_flavor_floors_differ_for_tiny_blocks():
    # an all-zero block exposes the amax floor: aiter 1e-10, vLLM block 1e-12, DeepSeek 1e-4
    w = torch.zeros(128, 128)
    for flavor, floor, fmt_max_value in ((AITER, 1e-10, 448.0), (VLLM, 1e-12, 448.0), (DEEPSEEK, 1e-4, 448.0)):
        q, s, _ = block_quantize(w, flavor=flavor)
        expected = f32(f32(torch.tensor(floor, dtype=torch.float64)) / fmt_max_value).float()
        assert torch.equal(s, expected.reshape(1, 1)), flavor.name
        assert (q.view(torch.uint8) == 0).all()
    for flavor, floor in ((AITER, 1e-10), (VLLM, 1e-10), (DEEPSEEK, 1e-4)):
        _, s, _ = group_quantize(torch.zeros(2, 128), fmt="fnuz", flavor=flavor)
        expected = f32(f32(torch.tensor(floor, dtype=torch.float64)) / flavor.fmt_max(E4M3FNUZ)).float()
        assert torch.equal(s, expected.expand(2, 1)), flavor.name


# --- aiter's four 1x128 quantizers ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["aiter-hip", "aiter-triton", "aiter-fused", "aiter-torch"])
def test_each_aiter_flavor_names_the_aiter_function_it_is(name):
    flavor = quant_flavor(name)
    assert "amd-aiter 0.1.7.post2.dev18" in flavor.models
    assert any(ext in flavor.models for ext in (".py ", ".cu "))
    assert not flavor.block_quantizer
    with pytest.raises(ValueError, match=rf"flavor '{name}' is aiter's 1x128 activation quantizer .* no 128x128"):
        block_quantize(torch.ones(128, 128), flavor=name)


@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ])
def test_aiter_hip_scale_is_amax_times_the_fp32_inverse_of_max(fmt):
    """quant_kernels.cu: `inverted_scale = absMax * inverted_DTYPE_MAX` with the inverse stored as a float;
    1 ulp from amax / max in about half the groups, never more."""
    x = _varied_groups(256, 4, seed=14).to(torch.bfloat16)
    _, hip, _ = group_quantize(x, fmt=fmt, flavor="aiter-hip")
    _, fused, _ = group_quantize(x, fmt=fmt, flavor="aiter-fused")
    amax = x.float().reshape(256, 4, 128).abs().amax(-1).double()
    inverse = f32(torch.tensor(1.0 / fmt.max, dtype=torch.float64))
    assert torch.equal(hip, f32(amax * inverse).float())
    ulps = (hip.view(torch.int32) - fused.view(torch.int32)).abs()
    assert ulps.max() <= 1 and 0.25 < (ulps == 1).float().mean() < 0.75


def test_aiter_hip_drops_nan_from_amax_like_fmaxf():
    x = torch.full((1, 128), 2.0)
    x[0, 3] = float("nan")
    q, scale, _ = group_quantize(x, flavor="aiter-hip")
    assert scale.item() == f32(torch.tensor(2.0, dtype=torch.float64) * f32(torch.tensor(1 / 448.0))).item()
    assert E4M3FN.is_nan_bytes(q[0]).nonzero().flatten().tolist() == [3]
    _, fused_scale, _ = group_quantize(x, flavor="aiter-fused")
    assert math.isnan(fused_scale.item())


def test_aiter_flavors_on_an_all_zero_group():
    """HIP and fused floor amax at 1e-10; Triton gives scale 0 and NaN bytes; torch replaces the scale by 1."""
    x = torch.zeros(1, 128)
    scales = {name: group_quantize(x, flavor=name)[1].item() for name in ("aiter-hip", "aiter-fused")}
    assert (
        scales["aiter-hip"] == f32(f32(torch.tensor(1e-10, dtype=torch.float64)) * f32(torch.tensor(1 / 448.0))).item()
    )
    assert scales["aiter-fused"] == f32(f32(torch.tensor(1e-10, dtype=torch.float64)) / 448.0).item()
    q, scale, _ = group_quantize(x, flavor="aiter-triton")
    assert scale.item() == 0.0 and E4M3FN.is_nan_bytes(q).all()
    q, scale, _ = group_quantize(x, flavor="aiter-torch")
    assert scale.item() == 1.0 and (q.view(torch.uint8) == 0).all()
