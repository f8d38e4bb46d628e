"""Cheap checks of a layer run's options, made before any weight is built or read."""

from __future__ import annotations

import json

import pytest
import torch

from mla_debug.model import Checkpoint, MLAConfig
from mla_debug.model.preflight import check_layer_options, layer_config, layer_positions


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


def test_positions_are_checked_against_the_configs_max_positions(no_weights):
    tiny = MLAConfig.preset("tiny")
    assert layer_positions(tiny, 4, 5000).tolist() == [5000, 5001, 5002, 5003]
    assert layer_positions(tiny, 3, positions=[7, 4097, 163839]).dtype == torch.int64
    assert check_layer_options("tiny", tokens=16, start_position=163824).name == "tiny"  # the last one fits
    with pytest.raises(ValueError, match=r"start_position=163825 with 16 tokens puts a token at position 163840"):
        check_layer_options("tiny", tokens=16, start_position=163825)
    small = tiny.with_(max_position_embeddings=4096)
    with pytest.raises(
        ValueError, match=r"past what tiny encodes: max_position_embeddings 4096 \(positions 0\.\.4095\)"
    ):
        layer_positions(small, 1, 4096)
    with pytest.raises(ValueError, match=r"positions holds 2 values, one per token is 3"):
        check_layer_options("tiny", tokens=3, positions=[1, 2])


def test_a_dense_checkpoint_folder_is_refused_from_its_headers(no_weights, tmp_path, monkeypatch):
    """The layer's dtypes come from the safetensors headers: a dense checkpoint is refused before any
    tensor is read, and a recipe is accepted for it only."""
    from ckpt_helpers import SafeOpenSpy

    from mla_debug.model.weight_recipe import DenseWeightsError

    monkeypatch.undo()  # saving needs the real constructors; the spy shows that no tensor is fetched
    dense = Checkpoint.synthetic("tiny", quantize=False, layer=2).save(tmp_path / "dense")
    fp8 = Checkpoint.synthetic("tiny", layer=2).save(tmp_path / "fp8")
    spy = SafeOpenSpy(monkeypatch)
    with pytest.raises(
        DenseWeightsError, match=r"checkpoint .*dense layer 2 holds dense \(unquantized\) linear weights"
    ):
        check_layer_options(checkpoint=dense, layer=2)
    assert check_layer_options(checkpoint=dense, layer=2, quantize="deepseek").quantized is False
    assert check_layer_options(checkpoint=fp8, layer=2).quantized
    with pytest.raises(ValueError, match=r"holds FP8 weights with their own block scales; quantize='vllm'"):
        check_layer_options(checkpoint=fp8, layer=2, quantize="vllm")
    assert spy.fetched == [] and set(spy.opened) == {"model.safetensors"}
    assert set(spy.sliced) == {
        f"model.layers.2.self_attn.{m}.weight" for m in Checkpoint.synthetic("tiny").linear_modules()
    }
