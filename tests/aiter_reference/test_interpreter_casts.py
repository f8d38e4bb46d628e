"""The interpreter workaround does what it says: without it the known defects show, with it torch's
round-to-nearest-even casts and a non-asserting tl.assume."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from mla_debug.gpu import triton_env  # noqa: E402

if torch.cuda.is_available() or not triton_env.interpreting() or triton_env.interpreter_error():
    pytest.skip("checks Triton's CPU interpreter (on for CPU-only machines)", allow_module_level=True)

from interpreter_casts import compiled_semantics  # noqa: E402


@triton.jit
def _casts(x_ptr, fp8_ptr, fnuz_ptr, bf16_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(fp8_ptr + offs, x.to(tl.float8e4nv))
    tl.store(fnuz_ptr + offs, x.to(tl.float8e4b8))
    tl.store(bf16_ptr + offs, x.to(tl.bfloat16))


@triton.jit
def _assumes_pid_positive(out_ptr):
    pid = tl.program_id(0)
    tl.assume(pid > 0)
    tl.store(out_ptr + pid, pid)


def _run_casts(x: torch.Tensor):
    n = x.numel()
    outs = (torch.empty(n, dtype=torch.float8_e4m3fn), torch.empty(n, dtype=torch.float8_e4m3fnuz))
    bf16 = torch.empty(n, dtype=torch.bfloat16)
    _casts[(1,)](x, *outs, bf16, N=n)
    return (*outs, bf16)


def _probe_values(gen: torch.Generator) -> torch.Tensor:
    # exact ties, values just above and below them, a carry into the exponent (7.9 -> 8), random values
    fixed = torch.tensor([7.9, -7.9, 1.0625, 1.1875, 0.5 + 2**-5, 1.0 + 2**-8, 1.0 + 3 * 2**-9, 200.0, -239.0, 0.0])
    return torch.cat([fixed, torch.randn(54, generator=gen) * 30]).to(torch.float32)


def test_without_the_workaround_the_interpreter_rounds_wrongly():
    x = torch.tensor([7.9, 1.0 + 2**-8 + 2**-20, 1.0625, 0.0], dtype=torch.float32)
    fp8, _, bf16 = _run_casts(x)
    assert fp8[0].float().item() == 4.0  # the lost carry: 7.9 should be 8.0
    assert bf16[1].float().item() == 1.0  # truncated: 1 + 2^-8 + 2^-20 rounds up to 1 + 2^-7
    out = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(Exception, match="Assume failed"):
        _assumes_pid_positive[(2,)](out)


def test_with_the_workaround_casts_match_torch_and_assume_is_a_hint(gen):
    x = _probe_values(gen)
    with compiled_semantics():
        fp8, fnuz, bf16 = _run_casts(x)
        out = torch.zeros(2, dtype=torch.int32)
        _assumes_pid_positive[(2,)](out)
    assert torch.equal(fp8.view(torch.uint8), x.to(torch.float8_e4m3fn).view(torch.uint8))
    in_range = x.abs() <= 240
    assert torch.equal(fnuz.view(torch.uint8)[in_range], x[in_range].to(torch.float8_e4m3fnuz).view(torch.uint8))
    assert torch.equal(bf16.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
    assert out.tolist() == [0, 1]
    # and it is undone afterwards
    assert _run_casts(torch.tensor([7.9]))[0].float().item() == 4.0
