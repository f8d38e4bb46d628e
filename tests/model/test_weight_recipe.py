"""Quantizing a dense checkpoint by a named recipe, as a serving engine sees an FP8 one; and the refusal
of dense weights without one."""

from __future__ import annotations

import pytest
import torch
from ckpt_helpers import assert_same_tensors

from mla_debug.model import Checkpoint, MLAConfig
from mla_debug.model.weight_recipe import DenseWeightsError, WeightRecipe, recipe_names, require_fp8

TINY = MLAConfig.preset("tiny")


def test_the_recipes_are_the_block_quantizing_flavors():
    assert set(recipe_names()) == {"aiter", "vllm", "deepseek", "deepgemm"}
    recipe = WeightRecipe.for_config(TINY)
    assert recipe == WeightRecipe("deepseek", (128, 128), "e4m3fn", ue8m0=False)
    assert WeightRecipe.for_config(TINY.with_(scale_fmt="ue8m0"), "DeepGEMM").ue8m0  # DeepSeek-V3.1+: powers of two
    assert WeightRecipe.for_config(TINY.with_(weight_block=(64, 128))).block == (64, 128)
    assert WeightRecipe.from_dict(recipe.to_dict()) == recipe and "448" in recipe.description
    with pytest.raises(ValueError, match=r"quantize='sglang-triton' is not a recipe .*valid: aiter, vllm, deepseek"):
        WeightRecipe.for_config(TINY, "sglang-triton")
    with pytest.raises(TypeError, match=r"quantize=True must be a recipe name"):
        WeightRecipe.for_config(TINY, True)


def test_deepseeks_recipe_on_a_dense_checkpoint_gives_the_synthetic_fp8_bytes():
    dense = Checkpoint.synthetic(TINY, seed=4, quantize=False, layer=5)
    fp8 = dense.quantized_with(WeightRecipe.for_config(dense.cfg))
    assert fp8.quantized and fp8.layer == 5 and fp8.cfg == TINY
    assert_same_tensors(fp8.tensors, Checkpoint.synthetic(TINY, seed=4).tensors)
    with pytest.raises(ValueError, match=r"the linear weights are e4m3fn already; a recipe quantizes dense ones"):
        fp8.quantized_with(WeightRecipe.for_config(TINY))


def test_ue8m0_recipe_rounds_every_block_scale_up_to_a_power_of_two():
    dense = Checkpoint.synthetic(TINY, seed=4, quantize=False)
    plain = dense.quantized_with(WeightRecipe.for_config(TINY))
    power = dense.quantized_with(WeightRecipe.for_config(TINY.with_(scale_fmt="ue8m0")))
    for module in power.linear_modules():
        scale, unrounded = power.tensors[f"{module}.weight_scale_inv"], plain.tensors[f"{module}.weight_scale_inv"]
        assert torch.equal(torch.log2(scale), torch.log2(scale).round()), module
        assert bool((scale >= unrounded).all()) and bool((scale < 2 * unrounded).all()), module


def test_require_fp8_refuses_dense_weights_without_a_recipe_and_a_recipe_for_fp8_ones():
    require_fp8(True, None, "x")
    require_fp8(False, "deepseek", "x")
    with pytest.raises(DenseWeightsError, match=r"layer 3 holds dense \(unquantized\) linear weights"):
        require_fp8(False, None, "layer 3")
    with pytest.raises(ValueError, match=r"layer 3 holds FP8 weights with their own block scales"):
        require_fp8(True, "deepseek", "layer 3")
    assert issubclass(DenseWeightsError, ValueError)  # the CLI's one-line errors catch it
