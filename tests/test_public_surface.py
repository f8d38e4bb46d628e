"""The package root is the public surface: thirty-odd names (entry points, result types, the core
types they are made of), each importable; everything else is reached through its layer's package, and a
name that used to be at the root says where it lives now instead of failing with a bare AttributeError."""

from __future__ import annotations

import importlib

import pytest

import mla_debug as md


def test_the_root_keeps_thirty_odd_names():
    assert 25 <= len(md.__all__) <= 45, sorted(md.__all__)
    assert len(set(md.__all__)) == len(md.__all__)


@pytest.mark.parametrize("name", md.__all__)
def test_every_root_name_resolves(name):
    assert getattr(md, name) is not None


@pytest.mark.parametrize("name", sorted(md._MOVED))
def test_a_moved_name_lives_in_its_package_and_the_root_says_where(name):
    home = md._MOVED[name]
    assert name in importlib.import_module(f"mla_debug.{home}").__all__
    assert name not in md.__all__
    with pytest.raises(AttributeError, match=rf"md\.{home}\.{name}"):
        getattr(md, name)


def test_an_unknown_name_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        md.nope  # noqa: B018
    assert not hasattr(md, "nope")


def test_capture_is_its_package_and_its_entry_point():
    import mla_debug.capture as capture_package

    assert md.capture is capture_package and callable(md.capture)
    assert {"capture", "load_capture", "Capture"} <= set(md.__all__)
    assert md.load_capture is md.capture.load_capture and md.Capture is md.capture.Capture
    typed = {"CapturedTensor", "CaptureManifest", "RankCapture", "TensorRole", "Shard", "EngineInfo", "RankDisagreement"}
    assert typed <= set(md.capture.__all__)
