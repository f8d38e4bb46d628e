"""Cheap checks of a layer run's options, made before any weight is built or read."""

from __future__ import annotations

import json

import pytest

from mla_debug.model import Checkpoint, MLAConfig
from mla_debug.model.preflight import check_layer_options, layer_config


@pytest.fixture
def no_weights(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("weights were built or read")

    monkeypatch.setattr(Checkpoint, "synthetic", classmethod(refuse))
    monkeypatch.setattr(Checkpoint, "load", classmethod(refuse))


def test_config_of_a_preset_an_mla_config_and_a_checkpoint_folder(no_weights, tmp_path):
    v3 = MLAConfig.preset("deepseek-v3")
    assert layer_config("deepseek-v3") is v3 and layer_config(v3) is v3
    folder = tmp_path / "dsv3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(v3.to_hf()))
    assert layer_config("tiny", folder) == v3.with_(name="dsv3")  # the checkpoint's config wins
    (folder / "model.safetensors").write_bytes(b"")  # never opened: only the folder's config.json is read
    assert layer_config("tiny", folder / "model.safetensors") == v3.with_(name="dsv3")
    with pytest.raises(FileNotFoundError, match="checkpoint .*missing does not exist"):
        layer_config(checkpoint=tmp_path / "missing")
    with pytest.raises(TypeError, match="model must be a preset name or an MLAConfig, got int"):
        layer_config(3)


def test_checks_every_option_against_the_config(no_weights):
    assert check_layer_options("deepseek-v3", tp_sizes=(1, 2, 4, 8), tokens=16).name == "deepseek-v3"
    assert check_layer_options("deepseek-v4-flash", tp_sizes=(8,)).arch == "v4"
    cases = [
        (dict(tp_sizes=(1, 3)), ValueError, "deepseek-v3: tp_size=3 does not divide num_heads=128"),
        (dict(tp_sizes=(0,)), ValueError, "deepseek-v3: tp_size=0 must be >= 1"),
        (dict(tp_sizes=(2.0,)), TypeError, r"TP sizes must be ints, got \[2.0\]"),
        (dict(tp_sizes=(2, 4, 2)), ValueError, r"TP sizes \[2, 4, 2\]: 2 given more than once"),
        (dict(tokens=0), ValueError, "tokens=0 must be >= 1"),
        (dict(tokens=True), TypeError, "tokens=True must be an int"),
        (dict(layer=-1), ValueError, "layer=-1 must be >= 0"),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            check_layer_options("deepseek-v3", **options)
    # v4 shards its output groups too: 16 divides the heads (64) but not o_groups (8).
    with pytest.raises(ValueError, match="tp_size=16 does not divide o_groups=8"):
        check_layer_options("deepseek-v4-flash", tp_sizes=(16,))
