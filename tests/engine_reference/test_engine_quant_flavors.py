"""Every engine quantizer flavor against the engine's own function, byte for byte (fp8 bytes and scale bits).

The functions are the released ones, loaded from the vLLM 0.33.0 and SGLang 0.5.23 wheels (engine_quantizers
says how, and what little is stubbed): vLLM's ``QuantFP8.forward_native`` and DeepGEMM's casts run as torch
on the CPU, the Triton kernels of vLLM and SGLang under Triton's CPU interpreter, and vLLM's C++ quantizer
(not in the wheel) as an oracle written from its source. Inputs: every special kind of group
(engine_inputs), NaN/Inf where the function defines them, and hypothesis-drawn rows.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from engine_checks import assert_byte_exact, ours, run_engine
from engine_inputs import activation_rows, edge_groups, nonfinite_groups
from engine_quantizers import QUANTIZERS, EngineQuantizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SOURCES = [torch.bfloat16, torch.float32]


def _cases(ue8m0_of) -> list:
    return [
        pytest.param(
            q, fmt, ue8m0, id=f"{q.id}-{str(fmt).removeprefix('torch.float8_')}-{'ue8m0' if ue8m0 else 'fp32'}"
        )
        for q in QUANTIZERS
        for fmt, ue8m0 in itertools.product(q.formats, ue8m0_of(q))
    ]


# The interpreter's numpy warns about what the engines' kernels do on purpose (0 * inf, x / inf) on the way.
pytestmark = pytest.mark.filterwarnings(
    "ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning", "ignore:divide by zero:RuntimeWarning"
)


@pytest.mark.parametrize("source", SOURCES, ids=["bf16", "fp32"])
@pytest.mark.parametrize(("quantizer", "fmt", "ue8m0"), _cases(lambda q: q.ue8m0))
def test_flavor_is_byte_exact_on_every_kind_of_group(quantizer: EngineQuantizer, fmt, ue8m0, source):
    x = edge_groups(source)
    q, scale = run_engine(quantizer, x, fmt, ue8m0)
    assert_byte_exact(ours(x, fmt, quantizer.flavor, ue8m0), q, scale, f"{quantizer.id} on edge groups")


@pytest.mark.parametrize("source", SOURCES, ids=["bf16", "fp32"])
@pytest.mark.parametrize(("quantizer", "fmt", "ue8m0"), _cases(lambda q: q.nonfinite_ue8m0))
def test_flavor_is_byte_exact_on_nan_and_inf(quantizer: EngineQuantizer, fmt, ue8m0, source):
    x = nonfinite_groups(source)
    q, scale = run_engine(quantizer, x, fmt, ue8m0)
    assert_byte_exact(ours(x, fmt, quantizer.flavor, ue8m0), q, scale, f"{quantizer.id} on NaN/Inf groups")


def _property_check(quantizer: EngineQuantizer, data) -> None:
    fmt = data.draw(st.sampled_from(quantizer.formats), label="format")
    ue8m0 = data.draw(st.sampled_from(quantizer.ue8m0), label="ue8m0")
    x = data.draw(activation_rows(nonfinite=ue8m0 in quantizer.nonfinite_ue8m0), label="x")
    q, scale = run_engine(quantizer, x, fmt, ue8m0)
    assert_byte_exact(ours(x, fmt, quantizer.flavor, ue8m0), q, scale, f"{quantizer.id} on drawn rows")


TORCH_AND_ORACLE = [q for q in QUANTIZERS if q.runs_on != "triton"]
TRITON = [q for q in QUANTIZERS if q.runs_on == "triton"]


@pytest.mark.parametrize("quantizer", TORCH_AND_ORACLE, ids=[q.id for q in TORCH_AND_ORACLE])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flavor_is_byte_exact_on_drawn_rows(quantizer: EngineQuantizer, data):
    _property_check(quantizer, data)


# Fewer examples for the interpreted kernels: one Triton program per group, each a few numpy calls.
@pytest.mark.parametrize("quantizer", TRITON, ids=[q.id for q in TRITON])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_interpreted_kernel_flavor_is_byte_exact_on_drawn_rows(quantizer: EngineQuantizer, data):
    _property_check(quantizer, data)
