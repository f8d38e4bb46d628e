"""Scale representations (mla_debug.layouts.scale_format) against code that is not ours: torch's own
float8_e8m0fnu cast, DeepGEMM's packer (through `layouts.pack_ue8m0`, which the engine-reference tests hold
to SGLang 0.5.23's copy of it), and the worked example of DeepGEMM PR #337 for the unmasked CUDA packer;
property tests for every transform."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_debug.layouts import scale_format as sf


def powers_of_two(shape, gen) -> torch.Tensor:
    return torch.ldexp(torch.ones(shape), torch.randint(-30, 10, shape, generator=gen)).to(torch.float32)


def test_the_unmasked_packer_gives_deepgemm_pr_337s_example():
    """DeepGEMM PR #337: four copies of 0.006975 (exponent 0x77) pack to 0x77ffffff, not 0x77777777."""
    scale = torch.full((1, 4), 0.006975)
    unmasked = int(sf.pack_exponents(scale, masked=False)[0, 0]) & 0xFFFFFFFF
    masked = int(sf.pack_exponents(scale, masked=True)[0, 0]) & 0xFFFFFFFF
    assert (unmasked, masked) == (0x77FFFFFF, 0x77777777)
    read = sf.unpack_exponents(sf.pack_exponents(scale, masked=False), 4)
    assert torch.isnan(read[0, :3]).all() and read[0, 3] == 2.0**-8  # 0xFF is NaN; byte 3 keeps its exponent


@pytest.mark.skipif(not hasattr(torch, "float8_e8m0fnu"), reason="this torch has no float8_e8m0fnu")
def test_codes_are_torchs_e8m0_cast_bytes_and_values():
    gen = torch.Generator().manual_seed(0)
    scale = powers_of_two((64,), gen)
    torch_codes = scale.to(torch.float8_e8m0fnu).view(torch.uint8)
    assert torch.equal(sf.e8m0_codes(scale), torch_codes)
    assert torch.equal(sf.e8m0_values(torch_codes), scale)
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    theirs = every.view(torch.float8_e8m0fnu).to(torch.float32)
    ours = sf.e8m0_values(every)
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    finite = ~torch.isnan(ours)
    assert torch.equal(ours[finite], theirs[finite])


def test_codes_refuse_scales_that_are_not_powers_of_two():
    with pytest.raises(ValueError, match=r"scale: shape \(2,\).*not positive powers of two.*0\.3"):
        sf.e8m0_codes(torch.tensor([0.25, 0.3]))


def test_the_misreads_of_issue_43416_and_pr_48052():
    codes = sf.e8m0_codes(torch.tensor([2.0**-7]))
    assert sf.codes_read_as_values(codes).item() == 120.0  # code 120 means 2^-7
    words = sf.pack_exponents(torch.full((1, 4), 2.0**-7))
    as_float = sf.words_read_as_fp32(words)
    assert as_float.view(torch.int32).item() == 0x78787878  # four codes taken for one float's bits
    wide = sf.packed_words_read_as_scales(words, 4)
    assert wide[0, 0] == as_float[0, 0] and torch.isnan(wide[0, 1:]).all()


@settings(max_examples=40, deadline=None)
@given(mn=st.integers(1, 9), groups=st.integers(1, 13), seed=st.integers(0, 2**16))
def test_masked_packing_round_trips_powers_of_two_and_truncates_the_rest(mn, groups, seed):
    gen = torch.Generator().manual_seed(seed)
    pow2 = powers_of_two((mn, groups), gen)
    assert torch.equal(sf.unpack_exponents(sf.pack_exponents(pow2), groups), pow2)
    assert torch.equal(sf.pack_exponents(pow2, masked=False), sf.pack_exponents(pow2))  # no mantissa, no leak
    scale = torch.rand((mn, groups), generator=gen) * 10 + 1e-3
    read = sf.unpack_exponents(sf.pack_exponents(scale), groups)
    assert torch.equal(read, sf.truncate_to_power_of_two(scale))
    assert bool((read <= scale).all() and (read > scale / 2).all())


@settings(max_examples=40, deadline=None)
@given(t=st.integers(1, 6), g=st.integers(1, 6), k=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_grouped_scale_read_is_a_permutation_identity_when_one_side_is_single(t, g, k, seed):
    scale = torch.rand((t, g, k), generator=torch.Generator().manual_seed(seed))
    read = sf.grouped_scale_read(scale, "group-major")
    assert sorted(read.flatten().tolist()) == sorted(scale.flatten().tolist())
    flat = scale.reshape(t * g, k)
    for ti in range(t):
        for gi in range(g):
            assert torch.equal(read[ti, gi], flat[gi * t + ti])
    if t == 1 or g == 1:
        assert torch.equal(read, scale)
    assert torch.equal(sf.grouped_scale_read(scale, "token-major"), scale)


@settings(max_examples=25, deadline=None)
@given(mn=st.integers(1, 40), groups=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_masked_packing_holds_the_words_of_the_packer_checked_against_sglangs_copy_of_deepgemms(mn, groups, seed):
    """`layouts.pack_ue8m0` is byte-exact with SGLang 0.5.23's torch copy of DeepGEMM's packer
    (tests/engine_reference/test_kernel_layouts_vs_engines.py), scales of any value; the masked packer here
    holds the same words in logical row-major order."""
    from mla_debug.layouts import pack_ue8m0

    gen = torch.Generator().manual_seed(seed)
    for scale in (powers_of_two((mn, groups), gen), torch.rand((mn, groups), generator=gen) + 1e-3):
        assert torch.equal(pack_ue8m0(scale).contiguous(), sf.pack_exponents(scale))
