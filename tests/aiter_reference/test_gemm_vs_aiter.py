"""aiter's Triton ``gemm_a8w8_blockscale`` against our block-scaled GEMM emulation, both accumulations.

- Where every fp32 operation is exact (small integer fp8 codes, power-of-two scales) all three agree bit
  for bit: any difference would be a different reading of the bytes, not rounding.
- On random data each lies within a stated bound of the float64 result: per 128-wide K block an fp32 dot
  of 128 exact products (error <= 128 u sum|x w|), two scale multiplies and the accumulation over G blocks
  (<= (G + 2) u), then one bf16 rounding of the fp32 result. So
  ``|y - y_exact| <= ulp_bf16(|y_exact|) + (128 + G + 2) u S`` with u = 2^-24 and S the same sum over
  absolute values. aiter multiplies ``(dot * x_scale) * w_scale``, our blockwise order
  ``dot * (x_scale * w_scale)``: they round differently and are not bitwise equal on random data.
- Scales are read by their strides (ROW_MAJOR and (1, M)-strided right, the COL_MAJOR "view" wrongly).
- The kernel class ``aiter-triton-blockscale`` runs that code, records the violation of a "view" scale,
  and falls back to the emulation of its contract where aiter's Triton cannot run.

Interpreted on CPU-only machines (tiny shapes, with the cast workaround); on a CUDA machine the same tests
run compiled (where the bound gains Hopper's tensor-core allowance), and test_aiter_gpu.py adds sizes.
"""

from __future__ import annotations

import pytest
import torch
from aiter_ref import assert_same_bits, require_aiter, triton_device, triton_semantics

import mla_debug as md
from mla_debug.gpu import aiter_triton
from mla_debug.kernels.block_gemm import block_scaled_mm

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

U = 2.0**-24


def exact_operands(m: int, n: int, k: int, seed: int, dtype=torch.float8_e4m3fn):
    """fp8 codes that are small integers and power-of-two scales: every product and sum exact in fp32."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, (m, k), generator=gen).float().to(dtype)
    w = torch.randint(-4, 5, (n, k), generator=gen).float().to(dtype)
    xs = torch.exp2(torch.randint(-6, 3, (m, k // 128), generator=gen).float())
    ws = torch.exp2(torch.randint(-6, 3, (-(-n // 128), k // 128), generator=gen).float())
    return x, w, xs, ws


def random_operands(m: int, n: int, k: int, seed: int, dtype=torch.float8_e4m3fn):
    gen = torch.Generator().manual_seed(seed)
    qa = md.quantize_groups(torch.randn(m, k, generator=gen), fmt=dtype, flavor="aiter-hip")
    weight = md.layouts.quantize_blocks(torch.randn(n, k, generator=gen) * 0.05, fmt=dtype, flavor="aiter")
    return qa.data, weight.data, qa.scale, weight.scale


def linear_of(w: torch.Tensor, ws: torch.Tensor) -> md.kernels.BlockScaledLinear:
    return md.kernels.BlockScaledLinear("w", md.QuantizedWeight(w, ws, md.numerics.fp8_format(w.dtype)))


def emulate(x, w, xs, ws, accumulation: str) -> torch.Tensor:
    return block_scaled_mm(md.numerics.fp8_format(x.dtype).decode(x), xs, linear_of(w, ws), None, accumulation)


# Hopper's fp8 tensor cores keep about 14 bits while adding inside an MMA (benchmarks/harness.py): compiled
# on an NVIDIA GPU each K block's dot may be off by up to 2^-13 of its sum of |products| beyond fp32's bound.
TENSOR_CORE_REL = 2.0**-13


def exact_and_bound(x, w, xs, ws) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 y and the error bound of the docstring (plus the tensor-core allowance on a CUDA GPU)."""
    fmt = md.numerics.fp8_format(x.dtype)
    xv, wv = fmt.decode(x).double(), fmt.decode(w).double()
    n, k = w.shape
    xs_full = xs.double().repeat_interleave(128, 1)
    ws_full = ws.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    y = (xv * xs_full) @ (wv * ws_full).t()
    s = (xv.abs() * xs_full) @ (wv.abs() * ws_full).t()
    ulp = torch.exp2(torch.floor(torch.log2(y.abs().clamp_min(1e-30))) - 7)
    tensor_cores = TENSOR_CORE_REL * s if torch.cuda.is_available() else 0.0
    return y, ulp + (128 + k // 128 + 2) * U * s + tensor_cores


def run_aiter(x, w, xs, ws, config=None) -> torch.Tensor:
    device = triton_device()
    with triton_semantics():
        out = aiter_triton.gemm_a8w8_blockscale(
            x.to(device), w.to(device), xs.to(device), ws.to(device), "gfx950", config=config
        )
    return out.cpu()


@pytest.mark.parametrize(("m", "n", "k"), [(1, 128, 256), (3, 256, 512), (5, 144, 384)])
def test_exact_arithmetic_all_three_agree_bitwise(m, n, k):
    require_aiter()
    x, w, xs, ws = exact_operands(m, n, k, seed=m)
    theirs = run_aiter(x, w, xs, ws)
    assert_same_bits(emulate(x, w, xs, ws, "blockwise"), theirs, "blockwise emulation vs aiter")
    assert_same_bits(emulate(x, w, xs, ws, "dequant"), theirs, "dequant emulation vs aiter")


def test_split_k_config_agrees_too():
    """aiter's split-K path (partial sums in fp32, then a reduce kernel whose tl.assume(pid > 0) the
    interpreter would assert) with a config that splits K in two."""
    require_aiter()
    x, w, xs, ws = exact_operands(4, 256, 512, seed=9)
    config = dict(aiter_triton.gemm_config(4, 256, 512, "gfx950", triton_device()), NUM_KSPLIT=2)
    theirs = run_aiter(x, w, xs, ws, config=config)
    assert_same_bits(emulate(x, w, xs, ws, "blockwise"), theirs, "split-K aiter vs blockwise emulation")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("m", "n", "k"), [(4, 256, 512), (7, 160, 768)])
def test_random_data_within_the_bound_for_aiter_and_both_emulations(seed, m, n, k):
    require_aiter()
    x, w, xs, ws = random_operands(m, n, k, seed)
    exact, bound = exact_and_bound(x, w, xs, ws)
    results = {
        "aiter": run_aiter(x, w, xs, ws),
        "blockwise": emulate(x, w, xs, ws, "blockwise"),
        "dequant": emulate(x, w, xs, ws, "dequant"),
    }
    for name, y in results.items():
        excess = (y.double() - exact).abs() - bound
        assert (excess <= 0).all(), (
            f"{name}: {int((excess > 0).sum())} outputs beyond the bound, worst {excess.max():.3g}"
        )


def test_scales_are_read_by_their_strides():
    require_aiter()
    x, w, xs, ws = exact_operands(4, 128, 512, seed=3)
    right = run_aiter(x, w, xs, ws)
    strided = xs.t().contiguous().t()  # COL_MAJOR_STRIDED: (1, M) strides, read right
    assert strided.stride() == (1, 4)
    assert_same_bits(run_aiter(x, w, strided, ws), right, "(1, M)-strided scale")
    view = md.layouts.present_scale(xs, md.ScaleLayout.COL_MAJOR)  # transposed bytes behind (G, 1) strides
    wrong = run_aiter(x, w, view, ws)
    as_row_bytes = md.layouts.read_scale(view, md.ScaleLayout.ROW_MAJOR)
    assert_same_bits(wrong, emulate(x, w, as_row_bytes, ws, "blockwise"), "a COL_MAJOR view read as row-major bytes")
    assert not torch.equal(wrong, right)


def test_aiter_config_choice_and_the_options_dropped_on_nvidia():
    require_aiter()
    pytest.importorskip("triton")
    amd = aiter_triton.gemm_config(8, 2112, 7168, "gfx950", torch.device("cpu"))
    # aiter/ops/triton/configs/gemm/MI350X-GEMM-A8W8_BLOCKSCALE-N=2112-K=7168.json, "small" (M < 32)
    assert (amd["BLOCK_SIZE_M"], amd["BLOCK_SIZE_N"], amd["NUM_KSPLIT"], amd["waves_per_eu"]) == (16, 16, 14, 2)
    if not getattr(torch.version, "hip", None):
        nvidia = aiter_triton.gemm_config(8, 2112, 7168, "gfx950", torch.device("cuda"))
        assert not set(aiter_triton.AMD_ONLY_LAUNCH_OPTIONS) & set(nvidia)
        assert {key: amd[key] for key in nvidia} == nvidia
    # MI300X: one "any" config for every shape, with kpack
    mi300 = aiter_triton.gemm_config(8, 2112, 7168, "gfx942", torch.device("cpu"))
    assert mi300["kpack"] == 2 and mi300["BLOCK_SIZE_M"] == 128
    # a fresh dict every time: aiter's wrapper edits the one it is given
    assert aiter_triton.gemm_config(8, 2112, 7168, "gfx950", torch.device("cpu")) is not amd


def test_the_kernel_class_runs_aiter_and_records_the_view_violation():
    require_aiter()
    device = triton_device()
    gen = torch.Generator().manual_seed(5)
    weight = md.layouts.quantize_blocks((torch.randn(256, 512, generator=gen) * 0.05).to(device))
    kernel = md.get_kernel("aiter-triton-blockscale", backend="triton")
    linear = md.kernels.BlockScaledLinear("w", weight).attach(kernel)
    emulated = md.kernels.BlockScaledLinear("w", weight).attach(
        md.get_kernel("aiter-triton-blockscale", backend="emulation")
    )
    qa = kernel.quantize_input(torch.randn(4, 512, generator=gen).to(torch.bfloat16).to(device), weight.fmt)
    assert qa.flavor == "aiter-hip" and qa.scale_layout is md.ScaleLayout.ROW_MAJOR
    layouts = md.ScaleLayout
    for layout, read_as in (
        (layouts.ROW_MAJOR, layouts.ROW_MAJOR),
        (layouts.COL_MAJOR_STRIDED, layouts.COL_MAJOR_STRIDED),
        (layouts.COL_MAJOR, layouts.ROW_MAJOR),
    ):
        given = qa.presented_as(layout)
        with triton_semantics():
            call = linear.run(given)
        assert call.scale_read_as is read_as and bool(call.violations) == (layout is layouts.COL_MAJOR), layout
        read = md.layouts.read_scale(given.scale, read_as).cpu()
        exact, bound = exact_and_bound(qa.data.cpu(), weight.data.cpu(), read, weight.scale.cpu())
        for y in (call.output, emulated.run(given).output):
            assert ((y.cpu().double() - exact).abs() <= bound).all(), layout
