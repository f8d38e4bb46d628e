"""Every aiter 1x128 quantizer that runs off ROCm against its flavor, byte for byte (bytes and scale bits).

- ``aiter-torch``: aiter's ``pertoken_quant`` per 128 (ops/quant.py), on the CPU.
- ``aiter-triton``: aiter's Triton ``_dynamic_per_token_quant_fp8_i8_kernel`` per 128 (interpreted here;
  compiled on a GPU in test_aiter_gpu.py).
- ``aiter-fused``: aiter's ``_fp8_quant_op``, the quant step of ``fused_rms_fp8_group_quant``, launched by
  a test kernel (aiter_quant_step.py) on arbitrary fp32 values (the whole fused op is in test_normquant_vs_aiter.py).
- ``aiter-hip`` has no code that runs off ROCm; its rules are checked from the kernel's source in
  tests/numerics/test_flavors.py.

The flavors also disagree with each other where the issue says they do; those differences are asserted
here too, so a flavor that drifted into another would fail.
"""

from __future__ import annotations

import pytest
import torch
from aiter_ref import assert_same_bits, require_aiter, triton_device, triton_semantics
from quant_inputs import activations

import mla_debug as md
from mla_debug.real_aiter import functions

ARCH_OF = {torch.float8_e4m3fn: "gfx950", torch.float8_e4m3fnuz: "gfx942"}
FORMATS = list(ARCH_OF)


def ours(x: torch.Tensor, dtype: torch.dtype, flavor: str) -> md.QuantizedActivation:
    return md.quantize_groups(x, 128, fmt=dtype, flavor=flavor)


@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("source", [torch.bfloat16, torch.float32])
def test_aiter_torch_flavor_is_pertoken_quant(dtype, seed, source):
    require_aiter()
    x = activations(64, 8, seed, source)
    q, scale = functions.torch_group_quant(ARCH_OF[dtype])(x, quant_dtype=dtype)
    mine = ours(x, dtype, "aiter-torch")
    assert_same_bits(mine.data, q, f"aiter-torch bytes ({dtype}, seed {seed})")
    assert_same_bits(mine.scale, scale, f"aiter-torch scales ({dtype}, seed {seed})")


def test_aiter_torch_differs_from_the_multiplying_flavors_by_its_division():
    """x / scale and x * (1/scale) round differently now and then (-168 -> -160 vs -176 in the issue)."""
    require_aiter()
    x = torch.randn(2560, 128, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    q, _ = functions.torch_group_quant("gfx950")(x, quant_dtype=torch.float8_e4m3fn)
    multiplied = ours(x, torch.float8_e4m3fn, "aiter-fused")
    differ = q.view(torch.uint8) != multiplied.data.view(torch.uint8)
    assert differ.any(), "no byte where division and multiplication by the reciprocal disagree"
    decoded = (q.float() - multiplied.data.float()).abs()[differ]
    steps = (q.float().abs()[differ] / 8).clamp_min(2.0**-9)  # e4m3 spacing near the value
    assert (decoded <= steps * 2).all()  # neighbouring codes, never more


# An all-zero group gets scale 0 in aiter's Triton quant, so its x / scale is 0/0: the NaN bytes are the
# behaviour checked, and the interpreter's numpy warns about the division on the way.
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize("seed", range(3))
def test_aiter_triton_flavor_is_the_triton_per_token_quant(dtype, seed):
    require_aiter()
    device = triton_device()
    if device.type == "cuda":
        pytest.skip("compiled on a GPU this runs in test_aiter_gpu.py (Triton's `/` is approximate there)")
    x = activations(4, 4, seed)  # interpreted: one program per 128-element group
    with triton_semantics():
        q, scale = functions.triton_group_quant(ARCH_OF[dtype])(x, quant_dtype=dtype)
    mine = ours(x, dtype, "aiter-triton")
    assert_same_bits(mine.data, q, f"aiter-triton bytes ({dtype}, seed {seed})")
    assert_same_bits(mine.scale, scale, f"aiter-triton scales ({dtype}, seed {seed})")
    zero_groups = x.view(4, 4, 128).abs().amax(-1) == 0
    assert zero_groups.any(), "these seeds draw an all-zero group: the case where aiter's Triton quant differs"
    # aiter: scale 0 and NaN bytes for an all-zero group
    assert (scale[zero_groups] == 0).all() and mine.data.view(4, 4, 128)[zero_groups].float().isnan().all()


@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize("seed", range(3))
def test_aiter_fused_flavor_is_the_fused_kernels_quant_step(dtype, seed):
    require_aiter()
    device = triton_device()
    if device.type == "cuda":
        pytest.skip("compiled on a GPU this runs in test_aiter_gpu.py (Triton's `/` is approximate there)")
    x = activations(4, 4, seed, torch.float32).to(device)
    q = torch.empty(x.shape, dtype=dtype, device=device)
    scale = torch.empty((4, 4), dtype=torch.float32, device=device)
    from aiter_quant_step import quant_rows

    with triton_semantics():
        quant_rows[(4,)](x, q, scale, BLOCK=512, GROUP=128, DMAX=torch.finfo(dtype).max)
    mine = ours(x, dtype, "aiter-fused")
    assert_same_bits(mine.data, q, f"aiter-fused bytes ({dtype}, seed {seed})")
    assert_same_bits(mine.scale, scale, f"aiter-fused scales ({dtype}, seed {seed})")
    assert_same_bits(ours(x, dtype, "aiter").data, q, "the 'aiter' name keeps aiter-fused's recipe")
