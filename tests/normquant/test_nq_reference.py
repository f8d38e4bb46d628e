"""The torch reference of fused_qk_rmsnorm_group_quant, bit for bit against an independent model."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from nq_cases import activations, check_against_oracle, make_case, norm_weight
from nq_oracle import (
    AITER_FLAVORS,
    FLAVORS,
    FN,
    FNUZ,
    assert_bits_equal,
    assert_fp8_equal,
    fused_reference,
    is_nan_byte,
)

import mla_debug as md
from mla_debug.layouts import ScaleLayout
from mla_debug.normquant import (
    available_backends,
    fused_qk_rmsnorm_group_quant,
    norm_then_quant,
    register_backend,
    resolve_backend,
    unregister_backend,
)
from mla_debug.normquant import reference as reference_module
from mla_debug.normquant.rmsnorm import nearest_root, sqrt_rn

PRODUCER = "fused_qk_rmsnorm_group_quant"
FUSED = fused_qk_rmsnorm_group_quant

RECIPES = list(itertools.product(FLAVORS + AITER_FLAVORS, (FN, FNUZ), (False, True)))
RECIPE_IDS = [f"{f}-{'fn' if d == FN else 'fnuz'}-{'col' if t else 'row'}" for f, d, t in RECIPES]


@pytest.mark.parametrize(("flavor", "fmt", "transpose"), RECIPES, ids=RECIPE_IDS)
def test_matches_oracle_every_flavor_format_and_layout(flavor, fmt, transpose):
    # deepseek on e4m3fnuz maps amax to 448 > 240: those values overflow to NaN, counted and warned
    case = make_case(m=12, n1=512, n2=192, seed=11, residual=True, fmt=fmt, flavor=flavor)
    check_against_oracle(FUSED, case, transpose, producer=PRODUCER)


OPTION_CASES = {
    "fp16-gemma-residual": dict(dtype=torch.float16, gemma_norm=True, residual=True),
    "fp32-gemma": dict(dtype=torch.float32, gemma_norm=True),
    "bf16-gemma-fnuz": dict(gemma_norm=True, fmt=FNUZ),
    "bf16-no-k": dict(n2=None),
    "group64-odd-n2": dict(group_size=64, n1=320, n2=96, residual=True),
    "group32-vllm": dict(group_size=32, n1=96, n2=40, flavor="vllm"),
    "one-token": dict(m=1, residual=True),
    "one-group": dict(m=5, n1=128, n2=64),
    "large-eps": dict(q_eps=0.5, k_eps=0.25),
}


@pytest.mark.parametrize("transpose", [False, True], ids=["row", "col"])
@pytest.mark.parametrize("options", OPTION_CASES.values(), ids=OPTION_CASES.keys())
def test_matches_oracle_with_options(options, transpose):
    options = dict(options)
    extra = {key: options.pop(key) for key in ("q_eps", "k_eps") if key in options}
    case = make_case(seed=21, **options)
    for key, value in extra.items():
        setattr(case, key, value)
    check_against_oracle(FUSED, case, transpose, producer=PRODUCER)


def test_widest_rows_accepted():
    case = make_case(m=2, n1=8192, n2=8192, seed=3)
    check_against_oracle(FUSED, case, transpose_scale=True)


def test_split_views_need_no_copies():
    # DeepSeek-V4 splits fused_wqa_wkv's output (M, Lq + head_dim) into qr and kv views
    m, n1, n2 = 9, 384, 160
    fused_out = activations(m, n1 + n2, torch.bfloat16, seed=5)
    q, k = fused_out.split([n1, n2], dim=1)
    residual_buffer = activations(m, n1 + 64, torch.bfloat16, seed=6, zero_rows=False)
    residual = residual_buffer[:, 64:]
    assert q.stride() == (n1 + n2, 1) and k.stride() == (n1 + n2, 1) and residual.stride() == (n1 + 64, 1)
    assert not q.is_contiguous() and not k.is_contiguous() and not residual.is_contiguous()
    weights = norm_weight(n1 + n2, torch.bfloat16, seed=5)
    q_w, k_w = weights.split([n1, n2])
    for transpose in (False, True):
        kwargs = dict(q_eps=1e-6, k_weight=k_w, transpose_scale=transpose, return_unquantized=True)
        views = FUSED(q, q_w, k=k, residual=residual, **kwargs)
        copies = FUSED(q.contiguous(), q_w.clone(), k=k.contiguous(), residual=residual.contiguous(), **kwargs)
        assert torch.equal(views.q_quant.data.view(torch.uint8), copies.q_quant.data.view(torch.uint8))
        assert views.q_quant.scale.stride() == copies.q_quant.scale.stride()
        assert_bits_equal(views.q_quant.scale, copies.q_quant.scale.double(), "scale buffer")
        for name in ("k_normed", "q_unquantized", "residual_sum"):
            assert_bits_equal(getattr(views, name), getattr(copies, name).double(), name)
    # and the views themselves against the oracle
    ref = fused_reference(q, q_w, 1e-6, 128, FN, "aiter", residual=residual)
    assert_fp8_equal(views.q_quant.data, ref["data"], FN)


def test_k_eps_defaults_to_q_eps():
    # small k rows, so eps visibly changes the normalization
    case = make_case(m=6, n1=256, n2=128, seed=8)
    k_small = case.k.float().mul(1e-3).to(torch.bfloat16)
    common = dict(q=case.q, q_weight=case.q_weight, q_eps=1e-2, k=k_small, k_weight=case.k_weight)
    default = FUSED(**common).k_normed
    explicit = FUSED(**common, k_eps=1e-2).k_normed
    other = FUSED(**common, k_eps=1e-6).k_normed
    assert torch.equal(default.view(torch.int16), explicit.view(torch.int16))
    assert not torch.equal(default, other)


def test_gemma_norm_multiplies_by_one_plus_weight():
    # 1 + 0 is exactly 1, so a zero gemma weight must give the plain norm with unit weight, bitwise;
    # and a gemma weight w gives the plain norm with weight (1 + w) when 1 + w is exact in bf16
    case = make_case(m=4, n1=256, n2=128, seed=9)
    plain = FUSED(case.q, torch.ones(256), 1e-6, case.k, torch.ones(128), return_unquantized=True)
    gemma = FUSED(case.q, torch.zeros(256), 1e-6, case.k, torch.zeros(128), gemma_norm=True, return_unquantized=True)
    assert torch.equal(plain.q_quant.data.view(torch.uint8), gemma.q_quant.data.view(torch.uint8))
    assert torch.equal(plain.q_quant.scale, gemma.q_quant.scale)
    assert torch.equal(plain.k_normed, gemma.k_normed)
    w = torch.linspace(-0.5, 0.5, 256).to(torch.bfloat16)  # 1 + w is exact in fp32
    shifted = FUSED(case.q, (1 + w.float()), 1e-6, gemma_norm=False).q_quant
    gemma_w = FUSED(case.q, w, 1e-6, gemma_norm=True).q_quant
    assert torch.equal(shifted.data.view(torch.uint8), gemma_w.data.view(torch.uint8))


def test_optional_outputs_are_none_when_not_asked_for():
    case = make_case(m=3, n1=128, n2=None, seed=1)
    result = FUSED(case.q, case.q_weight, 1e-6)
    assert result.k_normed is None and result.q_unquantized is None and result.residual_sum is None
    q_quant, k_normed, q_unq, res = result  # a plain 4-tuple as well
    assert q_quant is result.q_quant and len(result) == 4
    assert q_quant.producer == PRODUCER and q_quant.scale_layout is ScaleLayout.ROW_MAJOR


def test_nan_and_inf_flow_through():
    case = make_case(m=8, n1=256, n2=128, seed=12, residual=True, fmt=FNUZ)
    q, k = case.q.clone(), case.k.clone()
    q[2, 5] = math.nan
    q[3, 200] = math.inf  # row mean is Inf: r = 0, the Inf element becomes Inf*0 = NaN, the rest +-0
    q[4, 7], q[4, 9] = math.inf, -math.inf
    k[5, 3] = math.nan
    case.q, case.k = q, k
    ref = check_against_oracle(FUSED, case, transpose_scale=True)
    result = FUSED(**case.kwargs())
    nan = is_nan_byte(result.q_quant.data.view(torch.uint8), FNUZ)
    scale = result.q_quant.logical_scale()
    assert nan[2].all() and torch.isnan(scale[2]).all()
    assert nan[3, 128:].all() and not nan[3, :128].any()
    assert torch.isnan(scale[3, 1]) and scale[3, 0].item() == ref["scale"][3, 0].item() == pytest.approx(1e-10 / 240)
    assert torch.isnan(result.k_normed[5]).all() and not torch.isnan(result.k_normed[:5]).any()
    assert not nan[[0, 1, 6, 7]].any()


def test_empty_batch():
    result = FUSED(torch.empty(0, 256, dtype=torch.bfloat16), torch.ones(256), 1e-6, transpose_scale=True)
    assert result.q_quant.data.shape == (0, 256) and result.q_quant.scale.shape == (0, 2)


def test_fp32_inputs_are_rounded_once_on_both_paths():
    # the unfused path's rounding to the input dtype is the identity for fp32: both paths agree bitwise
    case = make_case(m=10, n1=512, n2=None, dtype=torch.float32, seed=13, residual=True)
    fused, unfused = FUSED(**case.kwargs()), norm_then_quant(**case.kwargs())
    assert torch.equal(fused.q_quant.data.view(torch.uint8), unfused.q_quant.data.view(torch.uint8))
    assert torch.equal(fused.q_quant.scale, unfused.q_quant.scale)


def test_sqrt_is_correctly_rounded():
    # torch's CPU sqrt is off by an ulp for some inputs; the reference's root must be the nearest one
    gen = torch.Generator().manual_seed(0)
    v = torch.exp(torch.randn(20000, generator=gen, dtype=torch.float64) * 20).to(torch.float32)
    v = torch.cat([v, torch.tensor([0.0, 1.0, 2.0, 4.0, 1e-45, 3.4e38, math.inf, math.nan])])
    expected = torch.tensor([math.sqrt(x) for x in v.double().tolist()], dtype=torch.float64)
    assert_bits_equal(sqrt_rn(v), expected, "sqrt_rn")
    # the correction step itself, from candidates one ulp off either way and from torch's fp32 root
    exact = expected.to(torch.float32)
    for candidate in (
        torch.nextafter(exact, torch.full_like(exact, math.inf)),
        torch.nextafter(exact, torch.zeros_like(exact)),
        torch.sqrt(v),
    ):
        assert_bits_equal(nearest_root(v, candidate), expected, "nearest_root")


# --- backends --------------------------------------------------------------------------------------


def test_auto_is_the_torch_reference_here():
    case = make_case(m=4, n1=256, n2=128, seed=14, residual=True)
    auto = FUSED(**case.kwargs(return_unquantized=True, backend="auto"))
    torch_ = FUSED(**case.kwargs(return_unquantized=True, backend="torch"))
    assert available_backends() == ("torch",) and resolve_backend("auto") == "torch"
    assert torch.equal(auto.q_quant.data.view(torch.uint8), torch_.q_quant.data.view(torch.uint8))
    for a, b in zip((auto.q_quant.scale, *auto[1:]), (torch_.q_quant.scale, *torch_[1:])):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", ["triton", "aiter", "cuda"])
def test_unregistered_backends_are_refused_with_the_available_ones(backend, monkeypatch):
    # Without the interpreter (tests/conftest.py turns it on for CPU-only machines) Triton cannot run here.
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    case = make_case(m=2, n1=128, n2=None, seed=1)
    with pytest.raises(ValueError) as err:
        FUSED(**case.kwargs(backend=backend))
    message = str(err.value)
    assert f"backend={backend!r} is not available here" in message
    assert "no implementation is registered under that name" in message
    assert "Registered backends: torch;" in message and "(now 'torch')" in message


def test_a_registered_backend_is_picked_by_auto():
    calls = []

    def fake(args, return_unquantized):
        calls.append(args.q.shape)
        return reference_module._torch_backend(args, return_unquantized)

    register_backend("triton", fake)
    try:
        assert available_backends() == ("triton", "torch")
        FUSED(torch.ones(2, 128), torch.ones(128), 1e-6)
        assert calls == [(2, 128)]
    finally:
        unregister_backend("triton")
    assert available_backends() == ("torch",)
    with pytest.raises(ValueError, match="cannot be removed"):
        unregister_backend("torch")


def test_exported_from_the_normquant_package():
    assert md.normquant.fused_qk_rmsnorm_group_quant is fused_qk_rmsnorm_group_quant
    assert "fused_qk_rmsnorm_group_quant" in md.normquant.__all__
