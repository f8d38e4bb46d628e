"""The rules the engine flavors' docstrings state, each shown on the engine's own function: vLLM-native's
scale floor, the fp32 log2 ue8m0 rounding below the scale, SGLang's row-major kernel refusing ue8m0, what
vLLM's Python wrapper hands the C++ quantizer (and that the wheel holds the kernels the oracle restates),
DeepGEMM's block casts, and which flavors are distinct and which coincide."""

from __future__ import annotations

import ast
import itertools
import re
import warnings
import zipfile

import engine_wheels
import pytest
import torch
from engine_checks import first_differences, ours, run_engine
from engine_inputs import GROUP, edge_groups, nonfinite_groups
from engine_quantizers import (
    BY_ID,
    FN,
    FNUZ,
    VLLM_FP8_UTILS,
    deepgemm_blocks,
    deepseek_blocks,
    vllm_fp8_min_max,
)
from engine_source import function_source

from mla_debug.layouts import quantize_blocks
from mla_debug.numerics import FLAVORS, Fp8OverflowWarning, fp8_format, quant_flavor
from mla_debug.numerics.engine_flavors import ENGINE_FLAVORS

pytestmark = pytest.mark.filterwarnings(
    "ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning", "ignore:divide by zero:RuntimeWarning"
)


@pytest.mark.parametrize(("fmt", "fp8_max"), [(FN, 448.0), (FNUZ, 224.0)])
def test_vllm_quantizes_with_224_on_fnuz_and_floors_native_scales_at_one_over_512_max(fmt, fp8_max):
    assert vllm_fp8_min_max(fmt) == (-fp8_max, fp8_max)
    x = torch.zeros(2, 2 * GROUP, dtype=torch.bfloat16)
    x[1, GROUP:] = 1e-4  # amax far below 2^-9: the floor decides this scale too
    _, scale = run_engine(BY_ID["vllm-native"], x, fmt, False)
    floor = torch.tensor(1.0 / (fp8_max * 512.0), dtype=torch.float64).to(torch.float32)
    assert (scale == floor).all(), scale
    assert quant_flavor("vllm-native").fmt_max(fp8_format(fmt)) == fp8_max
    assert (ours(x, fmt, "vllm-native", False).scale == floor).all()


@pytest.mark.parametrize("quantizer", ["vllm-native", "vllm-triton", "sglang-triton-colmajor", "vllm-cuda"])
@pytest.mark.parametrize(("fmt", "fp8_max"), [(FN, 448.0), (FNUZ, 224.0)])
def test_ue8m0_of_a_scale_one_ulp_above_a_power_of_two(quantizer, fmt, fp8_max):
    """exp2(ceil(log2(s))) in fp32: log2(2^-8 + 1 ulp) rounds to -8, so the scale becomes 2^-8, below s
    (vLLM-native, vLLM's and SGLang's Triton); vLLM's C++ kernel bumps the exponent bits: 2^-7."""
    amax = torch.nextafter(torch.tensor(fp8_max * 2.0**-8), torch.tensor(1e9))
    x = torch.full((1, GROUP), 0.001, dtype=torch.float32)
    x[0, 7] = amax
    raw = ours(x, fmt, quantizer, False).scale.item()
    assert raw > 2.0**-8, "the raw scale is just above 2^-8"
    _, engine_scale = run_engine(BY_ID[quantizer], x, fmt, True)
    expected = 2.0**-7 if quantizer == "vllm-cuda" else 2.0**-8
    assert engine_scale.item() == expected
    assert ours(x, fmt, quantizer, True).scale.item() == expected


def test_sglang_row_major_triton_quant_has_no_ue8m0_form():
    x = torch.ones(1, GROUP)
    with pytest.raises(AssertionError):
        run_engine(BY_ID["sglang-triton"], x, FN, True)  # `assert not scale_ue8m0` in _per_token_group_quant_8bit_raw
    with pytest.raises(ValueError, match="flavor 'sglang-triton' has no power-of-two scale form"):
        ours(x, FN, "sglang-triton", True)


def _call_args(source: str, callee: str) -> list[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == callee:
            return [ast.unparse(arg) for arg in node.args]
    raise AssertionError(f"no call of {callee}")


def test_vllm_wrapper_hands_the_cuda_quantizer_what_the_oracle_takes():
    """per_token_group_quant_fp8 (fp8_utils.py) passes eps (default 1e-10) and get_fp8_min_max()'s range to
    torch.ops._C.per_token_group_fp8_quant, the C++ op the vllm-cuda flavor and its oracle restate."""
    source = function_source("vllm", VLLM_FP8_UTILS, "per_token_group_quant_fp8")
    assert "eps: float = 1e-10" in source
    assert "fp8_min, fp8_max = get_fp8_min_max()" in source
    args = _call_args(source, "torch.ops._C.per_token_group_fp8_quant")
    assert args[:8] == ["x", "x_q", "x_s", "group_size", "eps", "fp8_min", "fp8_max", "use_ue8m0"]
    assert "current_platform.is_cuda_alike()" in source  # the C++ op serves CUDA and ROCm alike


def test_the_wheel_holds_the_cuda_kernels_the_oracle_restates():
    """The C++ source is not in the wheel; its compiled kernels are, and their symbols name what the oracle
    assumes: the register kernel for bf16 groups of 128 and the shared-memory one for fp32 input, both
    writing c10::Float8_e4m3fn (whose constructor is torch's fp32 -> e4m3fn cast)."""
    wheel = engine_wheels.require("vllm")
    symbols = (
        b"per_token_group_quant_8bit_register_kernelIN3c108BFloat16ENS0_13Float8_e4m3fnELb0ELb0ELi128E",
        b"per_token_group_quant_8bit_register_kernelIN3c108BFloat16ENS0_13Float8_e4m3fnELb0ELb1ELi128E",
        b"per_token_group_quant_8bit_kernelIfN3c1013Float8_e4m3fnELb0ELb0E",
    )
    with zipfile.ZipFile(wheel) as archive, archive.open("vllm/_C_stable_libtorch.abi3.so") as library:
        found, tail = set(), b""
        while chunk := library.read(1 << 24):
            window = tail + chunk
            found |= {s for s in symbols if s in window}
            tail = window[-200:]
    assert found == set(symbols)


def test_deepgemm_ue8m0_makes_a_nonfinite_scale_two_to_the_127_which_the_flavors_do_not():
    """DeepGEMM's ceil_to_ue8m0 clamps the exponent field to 254: a NaN or Inf scale becomes 2^127. The
    flavors keep it non-finite (documented on 'deepseek' and 'deepgemm'); finite scales agree."""
    x = nonfinite_groups(torch.float32)
    _, engine_scale = run_engine(BY_ID["deepseek"], x, FN, True)
    for flavor in ("deepseek", "deepgemm"):
        mine = ours(x, FN, flavor, True).scale
        finite = torch.isfinite(mine)
        assert (engine_scale[~finite] == 2.0**127).all() and (~finite).any()
        assert first_differences(mine[finite], engine_scale[finite], flavor) is None


@pytest.mark.parametrize("source", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("shape", [(256, 384), (200, 300)], ids=["whole-blocks", "partial-blocks"])
@pytest.mark.parametrize(("flavor", "ue8m0"), [("deepgemm", False), ("deepseek", False), ("deepseek", True)])
def test_deepgemm_block_casts_are_the_block_flavors(flavor, ue8m0, shape, source):
    gen = torch.Generator().manual_seed(shape[0] + ue8m0)
    w = torch.randn(shape, generator=gen) * torch.exp2(torch.randint(-12, 4, (shape[0], 1), generator=gen).float())
    w[:128, :128] = 0.0  # an all-zero block: the 1e-4 floor
    w = w.to(source)
    q, scale = deepgemm_blocks(w) if flavor == "deepgemm" else deepseek_blocks(w, ue8m0)
    mine = quantize_blocks(w, fmt=FN, flavor=flavor, ue8m0=ue8m0)
    assert first_differences(mine.data, q, f"{flavor} block bytes") is None
    assert first_differences(mine.scale, scale.contiguous(), f"{flavor} block scales") is None


# Pairs of flavors whose recipes coincide on these inputs, and why. Every other pair must differ somewhere,
# so a flavor that drifted into another's recipe fails here.
COINCIDE = {
    # the same arithmetic: floor 1e-10, amax / max, x / scale, NaN kept by the clamp, 224 on fnuz
    (False, frozenset({"vllm", "sglang-triton-colmajor"})),
    # ue8m0 makes amax * fp32(1/max) and amax / max the same power of two on every input here
    (True, frozenset({"vllm-triton", "sglang-triton-colmajor"})),
    # DeepGEMM's two per_token_cast_to_fp8 forms meet at a power-of-two scale
    (True, frozenset({"deepgemm", "deepseek"})),
}


def _outputs(flavor: str, ue8m0: bool) -> list[torch.Tensor]:
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Fp8OverflowWarning)
        for make, source, fmt in itertools.product(
            (edge_groups, nonfinite_groups), (torch.bfloat16, torch.float32), (FN, FNUZ)
        ):
            quantized = ours(make(source), fmt, flavor, ue8m0)
            out += [quantized.data.view(torch.uint8), torch.nan_to_num(quantized.scale, nan=-1.0)]
    return out


def _pairs() -> list:
    engine = [f.name for f in ENGINE_FLAVORS]
    pairs = []
    for ue8m0 in (False, True):
        usable = [name for name in FLAVORS if not (ue8m0 and FLAVORS[name].ue8m0_rule == "none")]
        pairs += [(a, b, ue8m0) for a, b in itertools.combinations(usable, 2) if a in engine or b in engine]
    return pairs


@pytest.mark.parametrize(("a", "b", "ue8m0"), _pairs(), ids=lambda v: str(v))
def test_engine_flavors_differ_from_every_other_flavor_except_where_their_recipes_coincide(a, b, ue8m0):
    same = all(torch.equal(x, y) for x, y in zip(_outputs(a, ue8m0), _outputs(b, ue8m0), strict=True))
    assert same == ((ue8m0, frozenset({a, b})) in COINCIDE)


@pytest.mark.parametrize("flavor", [f.name for f in ENGINE_FLAVORS])
def test_every_engine_flavor_cites_release_file_and_function(flavor):
    """`models` names the release, files that exist in its wheel (or, for C++, the source path) and functions
    those files define."""
    models = FLAVORS[flavor].models
    cited = re.findall(
        r"(vLLM 0\.33\.0|SGLang 0\.5\.23|FlashInfer 0\.7\.2\.post1) ((?:vllm|sglang|csrc|flashinfer)/[\w/]+\.(?:py|cuh|cu))",
        models,
    )
    assert cited, models
    for release, path in cited:
        if path.startswith("csrc/"):
            assert "oracle" in models, "a C++ source outside the wheel is checked against an oracle, and says so"
            continue
        if release.startswith("FlashInfer"):
            # CUDA source inside the wheel, run nowhere here: an oracle restates it (flashinfer_oracle)
            assert "oracle" in models
            engine_wheels.require("flashinfer-python")
            text = engine_wheels.source("flashinfer-python", path)
            kernels = re.findall(r"\b([a-z][a-z0-9]*_[a-z0-9_]+)\b", models.split(path, 1)[1].split(",")[0])
            assert any(f"__global__ void {name}(" in text for name in kernels), kernels
            continue
        package = "vllm" if release.startswith("vLLM") else "sglang"
        engine_wheels.require(package)
        text = engine_wheels.source(package, path)
        functions = re.findall(r"\b(_?[a-z][a-z0-9]*_[a-z0-9_]+)\b", models.split(path, 1)[1].split(";")[0])
        defined = [name for name in functions if re.search(rf"\bdef {name}\b|\bclass {name}\b", text)]
        assert defined, f"{flavor}: none of {functions} is defined in {path}"
