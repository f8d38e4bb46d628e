"""Block-quantizing a dense checkpoint the way a serving engine sees an FP8 one, and saying so.

A triage looks for bugs of FP8 block-scaled kernels: activation scales read in the wrong order, weights
shuffled twice, a weight read directly after its kernel re-laid it out. On dense (bf16) weights every
linear runs dense and none of those can happen, so a triage of a dense checkpoint - DeepSeek's
``fp8_cast_bf16.py`` output, Kimi-K2-Thinking's bf16 attention - would pass vacuously. It is refused
(`require_fp8`) unless the weights are quantized first with a named recipe (`WeightRecipe`), which the
report then states.

The default recipe is DeepSeek's for its released checkpoints: e4m3fn weights in 128x128 blocks, scale
``max(amax, 1e-4) / 448`` kept as fp32 ``weight_scale_inv`` (the ``deepseek`` flavor, DeepGEMM's
``per_block_cast_to_fp8``), rounded up to a power of two when the config's ``scale_fmt`` is ``ue8m0``
(DeepSeek-V3.1 and later release their weights that way).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._json_records import JsonRecord
from ..numerics import FLAVORS, quant_flavor
from .config import MLAConfig

DEFAULT_RECIPE = "deepseek"
# The element format of a released FP8 checkpoint; a platform that needs e4m3fnuz converts it at load,
# as the serving engines do (`model.linear`).
CHECKPOINT_FORMAT = "e4m3fn"


def recipe_names() -> list[str]:
    """The flavors that can quantize 128x128 weight blocks: what ``quantize=`` / ``--quantize`` take."""
    return [name for name, flavor in FLAVORS.items() if flavor.block_quantizer]


@dataclass(frozen=True)
class WeightRecipe(JsonRecord):
    """How dense linear weights were block-quantized here: the flavor (`numerics.flavors`), the block,
    the element format, and whether scales were rounded up to powers of two (ue8m0)."""

    flavor: str
    block: tuple[int, int]
    fmt: str
    ue8m0: bool

    @classmethod
    def for_config(cls, cfg: MLAConfig, flavor: str = DEFAULT_RECIPE) -> WeightRecipe:
        """The recipe `flavor` gives `cfg`'s weights: its block size, e4m3fn, ue8m0 per its scale_fmt."""
        if not isinstance(flavor, str):
            raise TypeError(f"quantize={flavor!r} must be a recipe name: {', '.join(recipe_names())}")
        if flavor.lower() not in recipe_names():
            raise ValueError(
                f"quantize={flavor!r} is not a recipe that quantizes 128x128 weight blocks; valid: "
                f"{', '.join(recipe_names())} (default {DEFAULT_RECIPE}: DeepSeek's released-checkpoint recipe)"
            )
        return cls(
            flavor=quant_flavor(flavor).name,
            block=tuple(cfg.weight_block),
            fmt=CHECKPOINT_FORMAT,
            ue8m0=cfg.scale_fmt == "ue8m0",
        )

    @property
    def description(self) -> str:
        """The flavor's own description (what its scale and quotient are)."""
        return quant_flavor(self.flavor).description


class DenseWeightsError(ValueError):
    """A triage asked of dense weights, which cannot show the FP8 bug classes (see the module docstring)."""


def require_fp8(quantized: bool, quantize: str | None, where: str) -> None:
    """Refuse a dense layer without a recipe (DenseWeightsError), and a recipe for a layer that is FP8
    already (ValueError): a recipe is applied only to dense weights."""
    if quantized and quantize is not None:
        raise ValueError(
            f"{where} holds FP8 weights with their own block scales; quantize={quantize!r} (CLI: --quantize) "
            "applies only to a dense (bf16/fp16/fp32) checkpoint - drop it to triage the weights as stored"
        )
    if not quantized and quantize is None:
        raise DenseWeightsError(
            f"{where} holds dense (unquantized) linear weights: every linear would run dense, so no FP8 kernel, "
            "activation-scale order or weight shuffle is exercised and a triage could not show the bugs it looks "
            f"for - it would pass whatever the serving engine does. Pass quantize={DEFAULT_RECIPE!r} (CLI: "
            f"--quantize {DEFAULT_RECIPE}) to block-quantize the weights as a serving engine sees an FP8 checkpoint "
            f"(DeepSeek's recipe: e4m3fn, 128x128 blocks, scale amax/448); recipes: {', '.join(recipe_names())}"
        )
