"""mla_debug's VNNI packing against the released op, byte for byte: torch.ops._C.convert_weight_packed of
vLLM 0.32's CPU build, on seeded random bytes of several shapes and both packed dtypes (run by the engine
runner in the engine's environment, compared here)."""

from __future__ import annotations

import torch

from mla_debug.layouts import vnni_pack, vnni_unpack


def test_vnni_pack_is_convert_weight_packed_byte_for_byte(op_checks):
    cases = sorted({key.rsplit(".", 1)[0] for key in op_checks if key.startswith("pack.")})
    assert len(cases) == 12
    for case in cases:
        given, packed = op_checks[f"{case}.in"], op_checks[f"{case}.out"]
        assert packed.shape == given.shape and packed.dtype == given.dtype, case
        assert torch.equal(vnni_pack(given, name=case).view(torch.uint8), packed.view(torch.uint8)), case
        assert torch.equal(vnni_unpack(packed, name=case).view(torch.uint8), given.view(torch.uint8)), case
