"""One implementation-choice mechanism: the registry the GEMM kernels and the norm+quant backends share,
and what each implementation says (name, operation, availability on a device, can-implement)."""

from __future__ import annotations

import pytest
import torch

import mla_debug as md
from mla_debug.implementations import Check, Implementation, Registry, UnknownImplementation
from mla_debug.kernels import GEMM, KERNELS, KernelPolicy, register_kernel
from mla_debug.kernels.reference import TorchReferenceKernel
from mla_debug.normquant import NORM_QUANT_BACKENDS, fused_qk_rmsnorm_group_quant
from mla_debug.normquant import reference as nq
from mla_debug.normquant._inputs import validate_inputs

# -- the registry ----------------------------------------------------------------------------------


def registry(**kwargs) -> Registry[str]:
    return Registry("adding", "adder", **kwargs)


def test_names_aliases_and_the_error_that_lists_them():
    adders = registry(keywords=("auto",))
    adders.register("fast", "FAST", aliases=("FastAdder",))
    adders.register("exact", "EXACT")
    assert adders.names() == ["exact", "fast"] and adders.items() == [("exact", "EXACT"), ("fast", "FAST")]
    assert adders.get("FastAdder") == "FAST" and adders.canonical("FastAdder") == "fast"
    assert adders.check_name("auto") == "auto" and adders.check_name("exact") == "exact"
    assert "fast" in adders and "FastAdder" in adders and "auto" not in adders and 3 not in adders
    with pytest.raises(UnknownImplementation) as err:
        adders.get("auto")  # a keyword chooses among the adders; it is not one
    assert str(err.value) == "unknown adder 'auto'; registered adders: exact, fast (or 'auto')"
    with pytest.raises(ValueError, match=r"^unknown adder 'slow'; registered adders: exact, fast \(or 'auto'\)$"):
        adders.check_name("slow")
    assert str(registry(plural="adderz").unknown("x")) == "unknown adder 'x'; registered adderz: (none)"


def test_registering_twice_is_refused_unless_it_is_the_same_entry_or_a_replacement():
    adders = registry(keywords=("auto",))
    entry = object()
    adders.register("fast", entry, aliases=("FastAdder",))
    adders.register("fast", entry, aliases=("FastAdder",))  # a module imported twice
    with pytest.raises(ValueError, match=r"an? adder named 'fast' is already registered \(object\)"):
        adders.register("fast", object())
    replacement = object()
    adders.register("fast", replacement, replace=True)
    assert adders.get("fast") is replacement and "FastAdder" not in adders  # the aliases are the new entry's
    with pytest.raises(ValueError, match="the name 'fast' is already the adder 'fast'"):
        adders.register("other", object(), aliases=("fast",))
    adders.register("other", object(), aliases=("Other",))
    with pytest.raises(ValueError, match="the name is already the adder 'other'"):
        adders.register("Other", object())
    with pytest.raises(ValueError, match="'auto' chooses among the adders; it cannot name one"):
        adders.register("auto", object())
    with pytest.raises(ValueError, match="non-empty strings"):
        adders.register(" ", object())


def test_a_registry_shadows_the_one_below_until_the_entry_is_removed():
    builtin = registry()
    builtin.register("fast", "builtin fast")
    builtin.register("exact", "builtin exact")
    user = registry(below=builtin)
    user.register("fast", "user fast")
    user.register("mine", "user mine")
    assert user.items() == [("exact", "builtin exact"), ("fast", "user fast"), ("mine", "user mine")]
    assert user.canonical("exact") == "exact"
    assert user.unregister("fast") == "user fast" and user.get("fast") == "builtin fast"
    assert user.unregister("exact") is None and user.get("exact") == "builtin exact"  # not this registry's


# -- kernels and norm+quant backends through it ----------------------------------------------------


def test_kernels_and_norm_quant_backends_are_implementations():
    for name in md.kernels.kernel_names():
        kernel = md.get_kernel(name)
        assert isinstance(kernel, Implementation) and kernel.operation == GEMM
        assert isinstance(kernel.availability(), Check) and isinstance(kernel.availability("cpu"), Check)
    for name, backend in NORM_QUANT_BACKENDS.items():
        assert isinstance(backend, Implementation) and backend.name == name
        assert backend.operation == "fused_qk_rmsnorm_group_quant" and backend.description
        assert isinstance(backend.availability("cpu"), Check)
    assert KERNELS.canonical("AiterPreshuffledFp8BlockScaledMMKernel") == "aiter-bpreshuffle"


def test_kernel_availability_on_a_device(monkeypatch):
    assert md.get_kernel("torch-reference").availability("meta") == Check(True, "pure torch; runs anywhere")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    emulating = md.get_kernel("triton-blockscale").availability("cpu")
    assert emulating.ok and "emulation's code" in emulating.reason
    if not torch.cuda.is_available():
        strict = md.get_kernel("triton-blockscale", backend="triton").availability("cpu")
        assert not strict.ok
        cublas = md.get_kernel("cublas-blockwise").availability("cpu")
        assert not cublas.ok and "NVIDIA CUDA GPU" in cublas.reason


def q_rows(m: int, width: int) -> torch.Tensor:
    return torch.randn(m, width, generator=torch.Generator().manual_seed(m * width)).to(torch.bfloat16)


def norm_quant_args(width: int, group_size: int):
    """A validated call of the op on 2 rows of `width` values quantized per `group_size`."""
    return validate_inputs(
        nq.OP,
        q_rows(2, width),
        torch.ones(width),
        1e-6,
        None,
        None,
        None,
        None,
        group_size,
        False,
        "e4m3fn",
        "aiter",
        False,
    )


def test_norm_quant_backends_say_which_calls_they_take():
    odd_groups, usual = norm_quant_args(width=96, group_size=96), norm_quant_args(width=128, group_size=128)
    torch_backend, triton = NORM_QUANT_BACKENDS.get("torch"), NORM_QUANT_BACKENDS.get("triton")
    assert torch_backend.can_implement(odd_groups) == Check(True, "takes these arguments")
    refused = triton.can_implement(odd_groups)
    assert not refused.ok and "group_size=96 is not a power of two" in refused.reason
    assert triton.can_implement(usual).ok
    aiter = NORM_QUANT_BACKENDS.get("aiter").can_implement(usual)
    assert aiter.ok or "aiter" in aiter.reason


# -- a new implementation registers and is selectable everywhere, named nowhere else -----------------


class ExtraKernel(TorchReferenceKernel):
    name = "extra-test-kernel"
    description = "the reference under another name"
    vllm_name = "ExtraTestKernel"

    def can_implement(self, problem):
        if problem.n % 32:
            return Check(False, f"N={problem.n} is not a multiple of 32")
        return Check(True, "takes N a multiple of 32")


@pytest.fixture
def extra_kernel():
    register_kernel(ExtraKernel)
    try:
        yield ExtraKernel
    finally:
        KERNELS.unregister(ExtraKernel.name)


def test_a_registered_kernel_is_selectable_and_valid_in_scenario_files(extra_kernel):
    assert "extra-test-kernel" in md.kernels.kernel_names()
    policy = KernelPolicy(["ExtraTestKernel", "torch-reference"])
    kernel, reason = policy.select("q_b_proj", 3072, 1536, "mi355x")
    assert kernel.name == "extra-test-kernel" and reason == "extra-test-kernel: takes N a multiple of 32"
    _, reason = policy.select("q_b_proj", 3080, 1536, "mi355x")
    assert reason == (
        "torch-reference: the reference takes any shape; skipped extra-test-kernel (N=3080 is not a multiple of 32)"
    )
    scenario = md.Scenario.from_dict({"name": "x", "priority": ["ExtraTestKernel"], "disabled": ["extra-test-kernel"]})
    assert scenario.priority == ("extra-test-kernel",) and scenario.disabled == ("extra-test-kernel",)


def test_a_registered_builtin_backend_runs_by_name_and_is_valid_in_scenario_files():
    calls = []

    def run(args, return_unquantized):
        calls.append(args.m)
        return nq._torch_backend(args, return_unquantized)

    nq.register_builtin_backend("extra-test-backend", run, lambda device: None, description="the reference again")
    try:
        fused_qk_rmsnorm_group_quant(q_rows(3, 128), torch.ones(128), 1e-6, backend="extra-test-backend")
        assert calls == [3]
        scenario = md.Scenario.from_dict({"name": "x", "behaviour": {"norm_quant_backend": "extra-test-backend"}})
        assert scenario.behaviour.norm_quant_backend == "extra-test-backend"
    finally:
        nq._BUILTIN.unregister("extra-test-backend")
    assert "extra-test-backend" not in NORM_QUANT_BACKENDS
