"""The platforms of today's engines: gfx1250 (vLLM 0.33's preshuffle architecture) and the B200
(Blackwell, DeepGEMM's packed ue8m0 scales), and `detect_platform` finding them from device properties."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import mla_debug as md
from mla_debug.kernels import platforms


def test_gfx1250_is_an_ocp_e4m3fn_rocm_platform_keyed_like_aiters_tuned_rows():
    plat = md.platform("gfx1250")
    assert (plat.vendor, plat.arch, plat.fp8) == ("amd", "gfx1250", md.E4M3FN) and plat.is_rocm
    # The CU count is what aiter's gfx1250 rows carry, so the embedded table matches this preset.
    assert md.kernels.TunedTable.embedded().has(plat, 7168, 4096)
    assert "assumed" in plat.description


def test_b200_is_blackwell_sm100_with_148_sms():
    plat = md.platform("b200")
    assert (plat.vendor, plat.arch, plat.cu_num, plat.fp8) == ("nvidia", "sm100", 148, md.E4M3FN) and plat.is_cuda


@pytest.mark.parametrize(
    ("hip", "props", "expected"),
    [
        ("7.2", SimpleNamespace(gcnArchName="gfx1250:sramecc+:xnack-", multi_processor_count=256, name="x"), "gfx1250"),
        (None, SimpleNamespace(major=10, minor=0, multi_processor_count=148, name="NVIDIA B200"), "b200"),
        (None, SimpleNamespace(major=10, minor=0, multi_processor_count=160, name="NVIDIA B300"), "sm100-160sm"),
        ("7.2", SimpleNamespace(gcnArchName="gfx1250", multi_processor_count=192, name="y"), "gfx1250-192cu"),
    ],
)
def test_detect_platform_finds_the_new_presets_and_describes_other_cards(monkeypatch, hip, props, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(torch.version, "hip", hip)
    found = platforms.detect_platform()
    assert found.name == expected
    assert found.fp8 is md.E4M3FN
