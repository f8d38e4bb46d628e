"""Backend selection by device, the errors of unavailable backends, and the inputs the new backends refuse.

Runs on any machine: CUDA and ROCm devices are only named (resolution never touches a tensor), aiter
is faked where its adapter's plumbing is checked, and Triton's interpreter is switched off per test
with TRITON_INTERPRET=0 where the CPU refusal is checked (tests/conftest.py switches it on globally
on machines without CUDA).
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import subprocess
import sys
import types

import pytest
import torch
from nq_cases import make_case

import mla_debug as md
from mla_debug.layouts import ScaleLayout
from mla_debug.normquant import (
    aiter_backend,
    available_backends,
    fused_qk_rmsnorm_group_quant,
    register_backend,
    resolve_backend,
    triton_norm_then_quant,
    triton_norm_then_quant_for_v4,
    unregister_backend,
)
from mla_debug.normquant import reference as reference_module
from mla_debug.normquant._inputs import validate_inputs

FUSED = fused_qk_rmsnorm_group_quant
BF16 = torch.bfloat16
OP = "fused_qk_rmsnorm_group_quant"


def _triton_installed() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def no_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("interpret", ["0", "1"])
def test_auto_is_torch_on_cpu_even_with_the_interpreter_on(monkeypatch, interpret):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    assert available_backends("cpu") == ("torch",)
    assert resolve_backend("auto", "cpu") == "torch" == resolve_backend("auto")
    case = make_case(m=2, n1=128, n2=64, seed=1)
    calls = []
    original = reference_module._BUILTIN.get("torch")
    counting = dataclasses.replace(original, run=lambda args, unq: calls.append(1) or original.run(args, unq))
    monkeypatch.setitem(reference_module._BUILTIN._entries, "torch", counting)
    FUSED(**case.kwargs())
    assert calls == [1]


@pytest.mark.skipif(not _triton_installed(), reason="triton is not installed")
def test_auto_picks_triton_for_cuda_tensors(no_interpreter):
    # resolution only looks at the device: no GPU needed to check the choice
    assert resolve_backend("auto", "cuda") == "triton"
    assert available_backends("cuda")[:1] == ("triton",) and "torch" in available_backends("cuda")


def test_auto_never_picks_the_interpreter_for_cuda_tensors(interpreter):
    assert resolve_backend("auto", "cuda") == "torch"
    assert "triton" not in available_backends("cuda")


def test_explicit_triton_on_cpu_without_the_interpreter_says_why(no_interpreter):
    case = make_case(m=2, n1=128, n2=None, seed=1)
    with pytest.raises(ValueError) as err:
        FUSED(**case.kwargs(backend="triton"))
    message = str(err.value)
    assert message.startswith(f"{OP}: backend='triton' is not available here")
    assert "for cpu tensors" in message and "TRITON_INTERPRET=1" in message and "CUDA" in message
    assert "Registered backends: torch;" in message and "(now 'torch')" in message


@pytest.mark.skipif(not _triton_installed(), reason="triton is not installed")
def test_explicit_triton_on_cpu_runs_under_the_interpreter(interpreter):
    from mla_debug.gpu.normquant import support

    why = support.triton_unavailable_reason(torch.device("cpu"))
    if why is not None:
        pytest.skip(why)
    assert resolve_backend("triton", "cpu") == "triton"
    assert "triton" not in available_backends("cpu")  # runs when named, is not offered


@pytest.mark.parametrize(
    ("device", "hip", "short_chain", "expected"),
    [
        ("cuda", None, True, True),
        ("cuda", None, False, False),
        ("cuda", "6.2", True, False),
        ("cpu", None, True, False),
    ],
)
def test_scales_are_stored_in_place_only_by_nvidia_launches_with_few_programs(
    monkeypatch, no_interpreter, device, hip, short_chain, expected
):
    # inline PTX exists only on NVIDIA GPUs (not ROCm, not the interpreter), and pays off only where a
    # launch's time is one thread's chain (short_chain: few programs)
    from mla_debug.gpu.normquant import support

    monkeypatch.setattr(torch.version, "hip", hip)
    config = support.RowLaunch(1, 4, short_chain=short_chain)
    assert support.scales_in_place(torch.device(device), config) is expected


def test_explicit_aiter_without_aiter_says_it_is_not_importable(monkeypatch):
    monkeypatch.setattr(aiter_backend, "_aiter_installed", lambda: False)
    case = make_case(m=2, n1=128, n2=None, seed=1)
    for device in ("cpu", "cuda"):
        with pytest.raises(ValueError) as err:
            resolve_backend("aiter", device)
        message = str(err.value)
        assert "backend='aiter' is not available here" in message
        assert "aiter is not importable" in message and "Registered backends: torch" in message
    with pytest.raises(ValueError, match="aiter is not importable"):
        FUSED(**case.kwargs(backend="aiter"))


def test_unknown_backend_lists_the_available_ones():
    with pytest.raises(ValueError) as err:
        resolve_backend("cuda-graph", "cpu")
    message = str(err.value)
    assert "backend='cuda-graph' is not available here: no implementation is registered under that name." in message
    assert "Registered backends: torch;" in message


def test_a_registered_backend_shadows_the_builtin_until_unregistered(no_interpreter):
    def fake(args, return_unquantized):
        return reference_module._torch_backend(args, return_unquantized)

    register_backend("triton", fake)
    try:
        assert available_backends("cpu") == ("triton", "torch") and resolve_backend("auto", "cpu") == "triton"
        with pytest.raises(ValueError, match="already registered"):
            register_backend("triton", lambda a, r: None)
    finally:
        unregister_backend("triton")
    assert available_backends("cpu") == ("torch",)
    assert "triton" in reference_module._BUILTIN  # the built-in serves again


def test_registered_backend_can_declare_its_devices():
    register_backend("cpu-only", reference_module._torch_backend, lambda d: None if d.type == "cpu" else "CPU only")
    try:
        assert "cpu-only" in available_backends("cpu") and "cpu-only" not in available_backends("meta")
        with pytest.raises(ValueError, match=r"backend='cpu-only'.*for meta tensors: CPU only"):
            resolve_backend("cpu-only", "meta")
    finally:
        unregister_backend("cpu-only")


def test_import_works_without_triton_and_aiter():
    code = (
        "import sys; sys.modules['triton'] = None; sys.modules['aiter'] = None\n"
        "import mla_debug as md, torch\n"
        "from mla_debug.normquant import available_backends, resolve_backend\n"
        "assert available_backends('cpu') == ('torch',) and resolve_backend('auto', 'cuda') == 'torch'\n"
        "try:\n"
        "    resolve_backend('triton', 'cuda')\n"
        "except ValueError as e:\n"
        "    assert 'triton is not importable' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
        "r = md.normquant.fused_qk_rmsnorm_group_quant(torch.ones(2, 128), torch.ones(128), 1e-6)\n"
        "assert r.q_quant.scale.shape == (2, 1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# --- the aiter adapter's plumbing, with a fake aiter ------------------------------------------------


def _fake_aiter(monkeypatch, with_gemma: bool):
    """A module standing in for aiter: its op fills the outputs from the torch reference, as aiter would
    lay them out, and records how it was called."""
    calls = []

    def op(
        q_out_quantized,
        q_out_scale,
        q,
        q_weight,
        q_epsilon,
        q_out_unquantized=None,
        k_out=None,
        q_res_out=None,
        k=None,
        k_weight=None,
        k_epsilon=None,
        q_residual=None,
        group_size=128,
        transpose_scale=False,
        gemma_norm=None,  # None: not passed
    ):
        extra = {} if gemma_norm is None else {"gemma_norm": gemma_norm}
        calls.append(dict(transpose=transpose_scale, k_epsilon=k_epsilon, extra=extra))
        ref = FUSED(
            q, q_weight, q_epsilon, k, k_weight, k_epsilon, q_residual, group_size, transpose_scale,
            q_out_quantized.dtype, "aiter", extra.get("gemma_norm", False), q_out_unquantized is not None, "torch",
        )  # fmt: skip
        q_out_quantized.copy_(ref.q_quant.data)
        q_out_scale.view(-1).copy_(ref.q_quant.scale.view(-1))  # the bytes, in the layout asked for
        for out, value in (
            (q_out_unquantized, ref.q_unquantized),
            (k_out, ref.k_normed),
            (q_res_out, ref.residual_sum),
        ):
            if out is not None:
                out.copy_(value)

    if not with_gemma:
        original = op

        def op(q_out_quantized, q_out_scale, q, q_weight, q_epsilon, q_out_unquantized=None, k_out=None,
               q_res_out=None, k=None, k_weight=None, k_epsilon=None, q_residual=None, group_size=128,
               transpose_scale=False):  # fmt: skip
            return original(q_out_quantized, q_out_scale, q, q_weight, q_epsilon, q_out_unquantized, k_out,
                            q_res_out, k, k_weight, k_epsilon, q_residual, group_size, transpose_scale)  # fmt: skip

    module = types.ModuleType("aiter")
    module.__spec__ = importlib.machinery.ModuleSpec("aiter", None)
    module.fused_qk_rmsnorm_group_quant = op
    module.dtypes = types.SimpleNamespace(fp8=torch.float8_e4m3fnuz)
    monkeypatch.setitem(sys.modules, "aiter", module)
    aiter_backend._aiter_installed.cache_clear()
    aiter_backend._aiter_op.cache_clear()
    return calls


@pytest.fixture
def fake_rocm(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)
    yield
    aiter_backend._aiter_installed.cache_clear()
    aiter_backend._aiter_op.cache_clear()


@pytest.mark.parametrize("transpose", [False, True], ids=["row", "col"])
def test_aiter_adapter_passes_arguments_in_aiters_order(monkeypatch, fake_rocm, transpose):
    calls = _fake_aiter(monkeypatch, with_gemma=True)
    assert resolve_backend("auto", "cuda") == "aiter" and available_backends("cuda")[0] == "aiter"
    case = make_case(m=3, n1=256, n2=64, seed=2, residual=True, fmt=torch.float8_e4m3fnuz, gemma_norm=True)
    args = validate_inputs(
        OP, case.q, case.q_weight, 1e-6, case.k, case.k_weight, None, case.residual, 128, transpose,
        "e4m3fnuz", "aiter", True,
    )  # fmt: skip
    result = aiter_backend._run(args, True)
    ref = FUSED(**case.kwargs(transpose_scale=transpose, return_unquantized=True, backend="torch"))
    assert calls[-1]["transpose"] is transpose and calls[-1]["extra"] == {"gemma_norm": True}
    assert calls[-1]["k_epsilon"] == 1e-6
    assert result.q_quant.scale_layout is (ScaleLayout.COL_MAJOR if transpose else ScaleLayout.ROW_MAJOR)
    assert result.q_quant.scale.shape == (3, 2) and result.q_quant.scale.is_contiguous()
    assert torch.equal(result.q_quant.scale.view(-1), ref.q_quant.scale.view(-1))
    assert torch.equal(result.q_quant.data.view(torch.uint8), ref.q_quant.data.view(torch.uint8))
    for name in ("k_normed", "q_unquantized", "residual_sum"):
        assert torch.equal(getattr(result, name), getattr(ref, name))


def test_aiter_adapter_refuses_what_aiters_kernel_cannot_do(monkeypatch, fake_rocm):
    _fake_aiter(monkeypatch, with_gemma=False)
    case = make_case(m=2, n1=128, n2=64, seed=3, fmt=torch.float8_e4m3fnuz)

    def args(**changes):
        kwargs = dict(q=case.q, q_weight=case.q_weight, q_eps=1e-6, k=case.k, k_weight=case.k_weight, k_eps=None,
                      residual=None, group_size=128, transpose_scale=False, fmt="e4m3fnuz", flavor="aiter",
                      gemma_norm=False)  # fmt: skip
        kwargs.update(changes)
        return validate_inputs(OP, *kwargs.values())

    bad = [
        (
            dict(flavor="vllm"),
            ValueError,
            "flavor='vllm': aiter's fused op quantizes with its own recipe, flavor 'aiter-fused'",
        ),
        (dict(fmt="e4m3fn"), ValueError, "fmt=e4m3fn: aiter's kernel writes this GPU's fp8 type"),
        (dict(q_weight=case.q_weight.float()), TypeError, "q_weight: shape (128,), dtype torch.float32"),
        (dict(q=case.q.float(), q_weight=case.q_weight.float()), TypeError, "q: shape (2, 128), dtype torch.float32"),
        (dict(gemma_norm=True), ValueError, "gemma_norm=True: this aiter's aiter.fused_qk_rmsnorm_group_quant has no"),
    ]
    for changes, error, fragment in bad:
        with pytest.raises(error) as caught:
            aiter_backend._run(args(**changes), False)
        assert str(caught.value).startswith(f"{OP}: ") and fragment in str(caught.value), str(caught.value)


def test_aiter_adapter_runs_the_released_triton_op_where_aiter_has_no_hip_one(monkeypatch, fake_rocm):
    """The released aiter has only the Triton fused_rms_fp8_group_quant (its own outputs, k in q's dtype);
    the adapter calls it in aiter's argument order and says which op ran."""
    calls = []

    def triton_op(inp1, inp1_weight, inp1_epsilon, inp2=None, inp2_weight=None, inp2_epsilon=None, group_size=128,
                  dtype_quant=None, res1=None, output_unquantized_inp1=False, transpose_scale=False):  # fmt: skip
        calls.append(dict(eps2=inp2_epsilon, dtype=dtype_quant, unq=output_unquantized_inp1, transpose=transpose_scale))
        ref = FUSED(inp1, inp1_weight, inp1_epsilon, inp2, inp2_weight, inp2_epsilon, res1, group_size,
                    transpose_scale, dtype_quant, "aiter-fused", return_unquantized=True, backend="torch")  # fmt: skip
        unq = ref.q_unquantized if output_unquantized_inp1 else None
        return (ref.q_quant.data, ref.q_quant.scale), unq, ref.k_normed, ref.residual_sum

    module = types.ModuleType("aiter")
    module.__spec__ = importlib.machinery.ModuleSpec("aiter", None)
    module.dtypes = types.SimpleNamespace(fp8=torch.float8_e4m3fn)
    triton_module = types.ModuleType("aiter.ops.triton.fused_fp8_quant")
    triton_module.fused_rms_fp8_group_quant = triton_op
    monkeypatch.setitem(sys.modules, "aiter", module)
    monkeypatch.setitem(sys.modules, "aiter.ops.triton.fused_fp8_quant", triton_module)
    aiter_backend._aiter_installed.cache_clear()
    aiter_backend._aiter_op.cache_clear()
    case = make_case(m=3, n1=256, n2=64, seed=4, residual=True)

    def args(gemma: bool = False):
        return validate_inputs(
            OP, case.q, case.q_weight, 1e-6, case.k, case.k_weight, None, case.residual, 128, True,
            "e4m3fn", "aiter-fused", gemma,
        )  # fmt: skip

    result = aiter_backend._run(args(), True)
    assert result.q_quant.producer == f"{OP} (aiter Triton fused_rms_fp8_group_quant)"
    assert calls == [dict(eps2=1e-6, dtype=torch.float8_e4m3fn, unq=True, transpose=True)]
    ref = FUSED(**case.kwargs(transpose_scale=True, return_unquantized=True), backend="torch")
    assert torch.equal(result.q_quant.data.view(torch.uint8), ref.q_quant.data.view(torch.uint8))
    assert result.q_quant.scale_layout is ScaleLayout.COL_MAJOR and result.q_quant.flavor == "aiter-fused"
    with pytest.raises(
        ValueError, match="this aiter's aiter.ops.triton.fused_fp8_quant.fused_rms_fp8_group_quant has no gemma"
    ):
        aiter_backend._run(args(gemma=True), False)


# --- bad inputs through the new entry points ----------------------------------------------------------

BAD = [
    ("width-not-multiple", dict(q=torch.ones(4, 200, dtype=BF16), q_weight=torch.ones(200)), "not a multiple of group_size=128"),
    ("too-wide", dict(q=torch.ones(1, 8320, dtype=BF16), q_weight=torch.ones(8320)), "exceeds 8192"),
    ("weight-shape", dict(q_weight=torch.ones(128, dtype=BF16)), "q_weight: shape (128,)"),
    ("weight-dtype", dict(q_weight=torch.ones(256, dtype=torch.int32)), "q_weight: shape (256,), dtype torch.int32"),
    ("last-dim-strided", dict(q=torch.ones(256, 4, dtype=BF16).t()), "stride(-1) == 1, got 4"),
    ("fmt", dict(fmt="e5m2"), "fmt='e5m2' is not a supported fp8 format"),
]  # fmt: skip


def _good() -> dict:
    return dict(
        q=torch.ones(4, 256, dtype=BF16),
        q_weight=torch.ones(256, dtype=BF16),
        q_eps=1e-6,
        k=torch.ones(4, 64, dtype=BF16),
        k_weight=torch.ones(64, dtype=BF16),
    )


@pytest.mark.parametrize("backend", ["triton", "aiter"])
@pytest.mark.parametrize(("changes", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_inputs_are_validated_before_any_backend_runs(changes, fragment, backend):
    # validation comes first, so the message is about the input whatever the backend's availability
    with pytest.raises((ValueError, TypeError)) as caught:
        FUSED(**{**_good(), **changes}, backend=backend)
    assert str(caught.value).startswith(f"{OP}: ") and fragment in str(caught.value), str(caught.value)


@pytest.mark.parametrize(("changes", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_triton_unfused_validates_like_the_torch_path(changes, fragment):
    kwargs = {**_good(), **changes}
    with pytest.raises((ValueError, TypeError)) as caught:
        triton_norm_then_quant(**kwargs)
    assert str(caught.value).startswith("norm_then_quant: ") and fragment in str(caught.value)
    with pytest.raises((ValueError, TypeError)) as caught:
        triton_norm_then_quant_for_v4(**kwargs)
    assert str(caught.value).startswith("norm_then_quant_for_v4: ") and fragment in str(caught.value)


def test_triton_unfused_on_cpu_without_the_interpreter_says_why(no_interpreter):
    with pytest.raises(RuntimeError, match=r"^norm_then_quant: the Triton backend cannot run on cpu tensors here"):
        triton_norm_then_quant(**_good())


def test_exported():
    assert md.normquant.fused_qk_rmsnorm_group_quant is FUSED
    assert callable(md.normquant.triton_norm_then_quant_for_v4)
