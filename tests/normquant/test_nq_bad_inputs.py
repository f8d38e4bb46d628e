"""Every input rule of docs/semantics.md §11 fails early, naming the argument, its shape and the rule."""

from __future__ import annotations

import math

import pytest
import torch

from mla_debug.normquant import (
    aiter_test_reference,
    fused_qk_rmsnorm_group_quant,
    norm_then_quant,
    norm_then_quant_for_v4,
)

BF16 = torch.bfloat16
FUNCTIONS = {
    "fused_qk_rmsnorm_group_quant": fused_qk_rmsnorm_group_quant,
    "norm_then_quant": norm_then_quant,
    "aiter_test_reference": aiter_test_reference,
}


def good(m: int = 4, n1: int = 256, n2: int = 64) -> dict:
    return dict(
        q=torch.ones(m, n1, dtype=BF16),
        q_weight=torch.ones(n1, dtype=BF16),
        q_eps=1e-6,
        k=torch.ones(m, n2, dtype=BF16),
        k_weight=torch.ones(n2, dtype=BF16),
    )


def with_(**changes) -> dict:
    kwargs = good()
    kwargs.update(changes)
    return kwargs


# (case id, kwargs, exception type, fragments the message must contain)
BAD = [
    (
        "q-width-not-multiple",
        with_(q=torch.ones(4, 200, dtype=BF16), q_weight=torch.ones(200)),
        ValueError,
        ["q: width n1=200", "shape (4, 200)", "not a multiple of group_size=128"],
    ),
    (
        "q-width-not-multiple-group64",
        with_(q=torch.ones(4, 96, dtype=BF16), q_weight=torch.ones(96), group_size=64),
        ValueError,
        ["q: width n1=96", "shape (4, 96)", "not a multiple of group_size=64"],
    ),
    (
        "q-too-wide",
        with_(q=torch.ones(1, 8320, dtype=BF16), q_weight=torch.ones(8320), k=None, k_weight=None),
        ValueError,
        ["q: width n1=8320", "shape (1, 8320)", "exceeds 8192"],
    ),
    (
        "k-too-wide",
        with_(k=torch.ones(4, 8200, dtype=BF16), k_weight=torch.ones(8200)),
        ValueError,
        ["k: width n2=8200", "shape (4, 8200)", "exceeds 8192"],
    ),
    (
        "k-one-too-wide",
        with_(k=torch.ones(4, 8193, dtype=BF16), k_weight=torch.ones(8193)),
        ValueError,
        ["k: width n2=8193", "exceeds 8192"],
    ),
    (
        "q-zero-width",
        with_(q=torch.ones(4, 0, dtype=BF16), q_weight=torch.ones(0)),
        ValueError,
        ["q: width n1=0", "must be positive"],
    ),
    (
        "q-weight-shape",
        with_(q_weight=torch.ones(128, dtype=BF16)),
        ValueError,
        ["q_weight: shape (128,)", "expected shape (256,)", "one weight per column of q"],
    ),
    (
        "k-weight-2d",
        with_(k_weight=torch.ones(1, 64, dtype=BF16)),
        ValueError,
        ["k_weight: shape (1, 64)", "expected shape (64,)", "one weight per column of k"],
    ),
    (
        "q-weight-int",
        with_(q_weight=torch.ones(256, dtype=torch.int32)),
        TypeError,
        ["q_weight: shape (256,), dtype torch.int32", "must be a float16/bfloat16/float32/float64 tensor"],
    ),
    (
        "k-weight-fp8",
        with_(k_weight=torch.ones(64).to(torch.float8_e4m3fn)),
        TypeError,
        ["k_weight: shape (64,), dtype torch.float8_e4m3fn", "must be a float16/bfloat16/float32/float64"],
    ),
    ("q-weight-not-tensor", with_(q_weight=[1.0] * 256), TypeError, ["q_weight: expected a torch.Tensor, got list"]),
    ("k-weight-missing", with_(k_weight=None), ValueError, ["k_weight is required with k", "shape (4, 64)"]),
    ("k-weight-without-k", with_(k=None), ValueError, ["k_weight was given without k"]),
    (
        "q-last-dim-strided",
        with_(q=torch.ones(256, 4, dtype=BF16).t()),
        ValueError,
        ["q: shape (4, 256)", "strides (1, 4)", "last dimension must be contiguous (stride(-1) == 1, got 4)"],
    ),
    (
        "k-last-dim-strided",
        with_(k=torch.ones(4, 128, dtype=BF16)[:, ::2]),
        ValueError,
        ["k: shape (4, 64)", "strides (128, 2)", "stride(-1) == 1, got 2"],
    ),
    (
        "residual-last-dim-strided",
        with_(residual=torch.ones(256, 4, dtype=BF16).t()),
        ValueError,
        ["residual: shape (4, 256)", "strides (1, 4)", "stride(-1) == 1, got 4"],
    ),
    (
        "q-weight-strided",
        with_(q_weight=torch.ones(512, dtype=BF16)[::2]),
        ValueError,
        ["q_weight: shape (256,)", "strides (2,)", "stride(-1) == 1, got 2"],
    ),
    ("fmt-unknown", with_(fmt="e5m2"), ValueError, ["fmt='e5m2' is not a supported fp8 format", "e4m3fn"]),
    ("fmt-wrong-type", with_(fmt=3), TypeError, ["fmt=3 is not a supported fp8 format"]),
    (
        "flavor-unknown",
        with_(flavor="sglang"),
        ValueError,
        ["flavor='sglang' is not a known quantization flavor", "aiter"],
    ),
    (
        "k-rows-differ",
        with_(k=torch.ones(3, 64, dtype=BF16)),
        ValueError,
        ["k: shape (3, 64)", "M=3 rows but q: shape (4, 256)", "M=4", "same number of rows"],
    ),
    (
        "residual-width",
        with_(residual=torch.ones(4, 128, dtype=BF16)),
        ValueError,
        ["residual: shape (4, 128)", "expected shape (4, 256)", "(M, n1) like q"],
    ),
    (
        "residual-rows",
        with_(residual=torch.ones(3, 256, dtype=BF16)),
        ValueError,
        ["residual: shape (3, 256)", "expected shape (4, 256)"],
    ),
    (
        "residual-int",
        with_(residual=torch.ones(4, 256, dtype=torch.int16)),
        TypeError,
        ["residual: shape (4, 256), dtype torch.int16", "has the wrong dtype"],
    ),
    ("q-3d", with_(q=torch.ones(2, 4, 256, dtype=BF16)), ValueError, ["q: shape (2, 4, 256)", "must be 2-D"]),
    (
        "q-float64",
        with_(q=torch.ones(4, 256, dtype=torch.float64)),
        TypeError,
        ["q: shape (4, 256), dtype torch.float64", "torch.bfloat16, torch.float16, torch.float32"],
    ),
    ("q-fp8", with_(q=torch.ones(4, 256).to(torch.float8_e4m3fn)), TypeError, ["q: shape (4, 256)", "wrong dtype"]),
    ("k-int", with_(k=torch.ones(4, 64, dtype=torch.int32)), TypeError, ["k: shape (4, 64), dtype torch.int32"]),
    ("eps-negative", with_(q_eps=-1e-6), ValueError, ["q_eps=-1e-06 must be finite and >= 0"]),
    ("eps-nan", with_(k_eps=math.nan), ValueError, ["k_eps=nan must be finite and >= 0"]),
    ("eps-string", with_(q_eps="1e-6"), TypeError, ["q_eps: expected a real number, got str"]),
    ("group-size-zero", with_(group_size=0), ValueError, ["group_size=0 must be positive"]),
    ("group-size-float", with_(group_size=128.0), TypeError, ["group_size must be an int, got float"]),
    (
        "weight-other-device",
        with_(q_weight=torch.ones(256, device="meta")),
        ValueError,
        ["q_weight is on meta but q is on cpu"],
    ),
]


@pytest.mark.parametrize("fn_name", FUNCTIONS)
@pytest.mark.parametrize(("kwargs", "error", "fragments"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_named(fn_name, kwargs, error, fragments):
    with pytest.raises(error) as caught:
        FUNCTIONS[fn_name](**kwargs)
    message = str(caught.value)
    assert message.startswith(f"{fn_name}: "), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_widths_at_the_limits_are_accepted():
    # the rules' boundaries: 8192 wide, one group, a k width that is no multiple of the group size
    fused_qk_rmsnorm_group_quant(torch.ones(1, 8192), torch.ones(8192), 1e-6, torch.ones(1, 8192), torch.ones(8192))
    fused_qk_rmsnorm_group_quant(torch.ones(2, 128), torch.ones(128), 0, torch.ones(2, 1), torch.ones(1))
    fused_qk_rmsnorm_group_quant(torch.ones(2, 32), torch.ones(32), 1e-6, group_size=32, fmt=torch.float8_e4m3fnuz)


def test_v4_baseline_validates_too():
    kwargs = good()
    with pytest.raises(
        ValueError, match=r"^norm_then_quant_for_v4: k: width n2=8200 \(shape \(4, 8200\).*exceeds 8192"
    ):
        norm_then_quant_for_v4(kwargs["q"], kwargs["q_weight"], 1e-6, torch.ones(4, 8200, dtype=BF16), torch.ones(8200))
    with pytest.raises(ValueError, match=r"^norm_then_quant_for_v4: q: width n1=200"):
        norm_then_quant_for_v4(torch.ones(4, 200), torch.ones(200), 1e-6, kwargs["k"], kwargs["k_weight"])


def test_backend_must_be_a_string():
    with pytest.raises(TypeError, match=r"^fused_qk_rmsnorm_group_quant: backend must be a string, got NoneType"):
        fused_qk_rmsnorm_group_quant(**good(), backend=None)
