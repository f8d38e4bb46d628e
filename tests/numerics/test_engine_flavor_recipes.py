"""The recipe elements the engine flavors brought (their bytes against the engines are in tests/engine_reference):
a NaN-to-min clamp, the fp32-log2 and floored ue8m0 rules, the max/amax multiplier, flavors without a ue8m0 or
a block form, and the equivalence that lets vLLM-native's scale floor be an amax floor."""

from __future__ import annotations

import pytest
import torch
from fp8_oracle import f32
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.numerics import E4M3FN, E4M3FNUZ, FLAVORS, QuantFlavor, block_quantize, group_quantize, quant_flavor

ENGINE_FLAVORS = ("vllm-native", "vllm-triton", "vllm-cuda", "sglang-triton", "sglang-triton-colmajor", "deepgemm")


@pytest.mark.parametrize("name", ENGINE_FLAVORS)
def test_engine_flavors_are_registered_and_cite_their_release(name):
    flavor = quant_flavor(name)
    assert FLAVORS[name] is flavor
    assert flavor.owner and any(release in flavor.models for release in ("vLLM 0.33.0", "SGLang 0.5.23"))


def test_engine_fnuz_max_is_224_and_deepgemm_always_448():
    for name in ENGINE_FLAVORS[:-1]:
        assert FLAVORS[name].fmt_max(E4M3FN) == 448.0 and FLAVORS[name].fmt_max(E4M3FNUZ) == 224.0
    assert FLAVORS["deepgemm"].fixed_max == 448.0


def test_a_nan_clamp_needs_a_clamp():
    with pytest.raises(ValueError, match="nan_clamps_to_min describes the clamp, but clamp=False"):
        QuantFlavor("mine", "test", 0.0, 0.0, "div", clamp=False, nan_clamps_to_min=True)


def test_vllm_cuda_drops_nan_from_amax_and_clamps_nan_and_inf_over_inf_to_minus_max():
    x = torch.full((2, 128), 2.0)
    x[0, 3] = float("nan")
    x[1, 0] = float("inf")
    q, scale, _ = group_quantize(x, flavor="vllm-cuda")
    assert scale[0].item() == f32(torch.tensor(2.0, dtype=torch.float64) / 448.0).item()
    assert q[0, 3].float().item() == -448.0 and (q[0, :3].float() == 448.0).all()
    assert scale[1].item() == float("inf")
    assert q[1, 0].float().item() == -448.0  # inf / inf is NaN, which fmaxf turns into -448
    assert (q[1, 1:].float() == 0).all()
    # the torch-written flavors keep NaN
    q_native, _, _ = group_quantize(x, flavor="vllm-native")
    assert q_native[0].float().isnan().all() and q_native[1, 0].float().isnan()


def test_log2_ue8m0_rounds_a_scale_just_above_a_power_of_two_down_and_exact_rounds_it_up():
    x = torch.full((1, 128), 0.01)
    x[0, 0] = torch.nextafter(torch.tensor(448.0 * 2.0**-10), torch.tensor(1e9))
    _, raw, _ = group_quantize(x, flavor="vllm-triton")
    assert raw.item() > 2.0**-10
    assert group_quantize(x, flavor="vllm-triton", ue8m0=True)[1].item() == 2.0**-10  # below raw
    assert group_quantize(x, flavor="vllm-cuda", ue8m0=True)[1].item() == 2.0**-9
    assert group_quantize(x, flavor="vllm", ue8m0=True)[1].item() == 2.0**-9


def test_vllm_cuda_ue8m0_floors_the_scale_at_1e_minus_10():
    """An all-zero group: amax 1e-10, scale 1e-10/448; the C++ ue8m0 step raises it to 1e-10 first, so the
    power of two is 2^-33, not 2^-42."""
    zeros = torch.zeros(1, 128)
    assert group_quantize(zeros, flavor="vllm-cuda", ue8m0=True)[1].item() == 2.0**-33
    assert group_quantize(zeros, flavor="sglang-triton-colmajor", ue8m0=True)[1].item() == 2.0**-42


@settings(max_examples=200, deadline=None)
@given(amax=st.floats(0.0, 1e6, width=32), fmt_max=st.sampled_from([448.0, 224.0]))
def test_vllm_native_scale_floor_is_the_amax_floor_2_to_the_minus_9(amax, fmt_max):
    """`(absmax / max).clamp(min=1 / (max * 512))` == `max(absmax, 2^-9) / max`, bit for bit: 2^-9 is exact,
    a power of two commutes with rounding and fp32 division is monotone."""
    a = torch.tensor([amax], dtype=torch.float32)
    engine = (a / fmt_max).clamp(min=1.0 / (fmt_max * 512.0))
    fmt = E4M3FN if fmt_max == 448.0 else E4M3FNUZ
    x = torch.zeros(1, 128)
    x[0, 0] = amax
    assert (
        group_quantize(x, fmt=fmt, flavor="vllm-native")[1].view(torch.int32).item() == engine.view(torch.int32).item()
    )


def test_deepgemm_multiplies_by_max_over_amax_as_torch_forms_it():
    """torch's `448.0 / amax` is `amax.reciprocal() * 448`: two roundings, not one division."""
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(2560, 128, generator=gen) * 3).to(torch.bfloat16)
    q, scale, _ = group_quantize(x, flavor="deepgemm")
    amax = x.float().abs().amax(-1, keepdim=True).clamp_min(1e-4)
    expected = (x.float() * (amax.reciprocal() * 448.0)).to(torch.float8_e4m3fn)
    assert torch.equal(q.view(torch.uint8), expected.view(torch.uint8))
    assert torch.equal(scale, amax / 448.0)  # (2560, 1): one group per row
    q_reciprocal, _, _ = group_quantize(x, flavor="deepseek")
    assert (q_reciprocal.view(torch.uint8) != q.view(torch.uint8)).any(), (
        "x*(448/amax) and x*(1/scale) differ somewhere"
    )


def test_a_flavor_without_a_ue8m0_form_says_so():
    with pytest.raises(ValueError, match=r"x: ue8m0=True, but flavor 'sglang-triton' has no power-of-two scale form"):
        group_quantize(torch.ones(1, 128), flavor="sglang-triton", ue8m0=True)


@pytest.mark.parametrize("name", [n for n in ENGINE_FLAVORS if n != "deepgemm"])
def test_engine_activation_quantizers_have_no_block_form(name):
    owner = FLAVORS[name].owner
    with pytest.raises(ValueError, match=rf"flavor '{name}' is {owner}'s 1x128 activation quantizer .* no 128x128"):
        block_quantize(torch.ones(128, 128), flavor=name)


def test_deepgemm_has_a_block_form_with_the_same_recipe():
    w = torch.randn(256, 128, generator=torch.Generator().manual_seed(4))
    q, scale, _ = block_quantize(w, flavor="deepgemm")
    blocks = w.view(2, 128, 128)
    amax = blocks.abs().amax(dim=(1, 2), keepdim=True).clamp_min(1e-4)
    expected = (blocks * (amax.reciprocal() * 448.0)).to(torch.float8_e4m3fn).view(256, 128)
    assert torch.equal(q.view(torch.uint8), expected.view(torch.uint8))
    assert torch.equal(scale, (amax / 448.0).view(2, 1))


def test_vllm_triton_and_cuda_scales_are_one_ulp_apart_in_about_half_the_groups():
    """0.33.0's Triton kernel forms amax * fp32(1/max), the C++ kernel amax / max (the README's figure)."""
    gen = torch.Generator().manual_seed(14)
    x = (torch.randn(512, 4, 128, generator=gen) * torch.exp2(torch.randint(-20, 20, (512, 4, 1), generator=gen))).view(
        512, 512
    )
    triton = group_quantize(x.to(torch.bfloat16), flavor="vllm-triton")[1]
    cuda = group_quantize(x.to(torch.bfloat16), flavor="vllm-cuda")[1]
    ulps = (triton.view(torch.int32) - cuda.view(torch.int32)).abs()
    assert ulps.max() <= 1 and 0.25 < (ulps == 1).float().mean() < 0.75


# -- FlashInfer's own input quant and the per-scale-order flavors ------------------------------------


@settings(max_examples=200, deadline=None)
@given(amax=st.floats(2.0**-100, 2.0**100, width=32), x=st.floats(-1.0, 1.0, width=32))
def test_flashinfer_multiplies_by_one_division_and_stores_its_reciprocal(amax, x):
    """`scale = 448.f / amax` (one fp32 rounding), `q = fp8(x * scale)`, stored `1.f / scale` - in float64
    rounded to fp32 after each step, the exact emulation of fp32 arithmetic (tests/numerics/fp8_oracle.py)."""
    row = torch.zeros(1, 128)
    row[0, 0], row[0, 1] = amax, x * amax
    q, scale, _ = group_quantize(row, flavor="flashinfer-sm90")
    multiplier = f32(torch.tensor(448.0, dtype=torch.float64) / f32(torch.tensor(amax, dtype=torch.float64)))
    expected = f32(f32(row[0, 1].double()) * multiplier).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert scale.item() == f32(1.0 / multiplier).item()
    assert q[0, 1].view(torch.uint8).item() == expected.view(torch.uint8).item()


def test_flashinfer_gives_an_all_zero_group_scale_one_and_has_no_floor():
    x = torch.zeros(2, 128)
    x[1, 5] = 1e-30  # far below every other flavor's amax floor
    q, scale, _ = group_quantize(x, flavor="flashinfer-sm90")
    assert scale[0].item() == 1.0 and (q[0].float() == 0).all()
    assert q[1, 5].float().item() == 448.0
    with pytest.raises(ValueError, match="flavor 'flashinfer-sm90' has no power-of-two scale form"):
        group_quantize(x, flavor="flashinfer-sm90", ue8m0=True)
    assert FLAVORS["flashinfer-sm90"].fmt_max(E4M3FNUZ) == 448.0  # FlashInfer writes e4m3fn only


def test_a_flavor_per_scale_order_names_both_kernels_of_its_engine_function():
    assert quant_flavor("sglang-triton").for_scale_order("col") == "sglang-triton-colmajor"
    assert quant_flavor("sglang-triton-colmajor").for_scale_order("row") == "sglang-triton"
    assert quant_flavor("vllm-triton").for_scale_order("col") == "vllm-triton"
    with pytest.raises(ValueError, match="by_scale_order .* one of which is this flavor"):
        QuantFlavor("mine", "test", 0.0, 0.0, "div", clamp=True, by_scale_order=("a", "b"))
