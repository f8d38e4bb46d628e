"""Build the per-rank layers of one run: shard the checkpoint, choose kernels, apply model-side behaviour.

A load is a sequence, and some verdicts depend on its order. The builder applies the model's load-time
behaviours in the engine's order:

1. the model sets its direct-read flags on each linear (`linear_flags`; DeepSeek-V4.1 on ROCm resets
   wo_a's ``is_bmm``: ``ModelBehaviour.v4_wo_a_is_bmm``);
2. each linear's kernel is chosen and processes its weight (`QuantizedLinear.load`);
3. the model's own post-load work: DeepSeek-V4's model-side preshuffle (`prepare_model_side`), and the
   derivation of DeepSeek-V3's W_UK / W_UV, which reads kv_b_proj's bytes as they were at the moment the
   load order puts it (before or after step 2; `model.load_order`), lazily at the first absorbed step.

SGLang's remote-KV loader (``ModelBehaviour.load_order="remote-kv"``) runs step 2 before the weights
arrive and copies in a saved, already processed state; the bytes a kernel then holds are the ones a
standard load gives it, so it changes only when W_UK / W_UV are derived - and the load history says so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..kernels import KernelPolicy, Platform, platform
from ..model.attention_v4 import MODEL_SHUFFLED, AttentionV4Rank, prepare_model_side
from ..model.linear import DenseLinear, QuantizedLinear
from ..model.load_order import REMOTE_KV_EVENT, absorbed_load_events
from ..model.mla_v3 import MLAv3Rank
from ..model.program import RankLayer
from ..scenarios import Scenario
from ..scenarios.behaviour import ModelBehaviour
from .sharding import REPLICATED, LinearSpec, full_weight, linear_specs, norm_names, shard

WO_A_RESET_EVENT = (
    "model reset is_bmm = False (DeepSeek-V4.1 on ROCm) although its grouped BMM still reads the weight directly"
)


def linear_flags(cfg, spec: LinearSpec, behaviour: ModelBehaviour, plat: Platform) -> tuple[dict, list[str]]:
    """The direct-read flags the model sets on `spec`'s linear under `behaviour` on `plat`, and the
    load-history lines that explain a change from the model's usual flags.

    DeepSeek-V4.1 on ROCm: vLLM 0.33.0 ``models/deepseek_v41/amd/rocm.py``,
    ``DeepseekV41ROCMAiterMLAAttention.__init__``, sets ``self.wo_a.is_bmm = False`` after the base
    class set it True, so the linear's kernel post-processes wo_a like any other weight.
    """
    flags = dict(spec.flags)
    if cfg.arch == "v4" and spec.name == "wo_a" and not behaviour.v4_wo_a_is_bmm and plat.is_rocm:
        flags["is_bmm"] = False
        return flags, [WO_A_RESET_EVENT]
    return flags, []


def load_behaviour(cfg, spec: LinearSpec, behaviour: ModelBehaviour, plat: Platform) -> ModelBehaviour | None:
    """The model behaviour a loaded linear's state depends on, or None when it depends on none: the
    linears the V4 model re-lays out itself, and any whose flags the behaviour changes. Shared linears
    (`parallel.cached`) are keyed by it."""
    if cfg.arch == "v4" and spec.name in MODEL_SHUFFLED:
        return behaviour
    flags, _ = linear_flags(cfg, spec, behaviour, plat)
    return behaviour if flags != spec.flags else None


def load_order_events(cfg, linears: dict, behaviour: ModelBehaviour) -> dict[str, list[str]]:
    """Per linear, the load-history lines the load order and the absorbed-weight rules add."""
    events: dict[str, list[str]] = {}
    if behaviour.load_order == "remote-kv":
        for name, linear in linears.items():
            if isinstance(linear, QuantizedLinear):
                events[name] = [REMOTE_KV_EVENT]
    if cfg.arch == "v3":
        absorbed = absorbed_load_events(behaviour)
        if absorbed:
            events.setdefault("kv_b_proj", []).extend(absorbed)
    return events


class LayerBuilder:
    """Builds rank layers for one (checkpoint, TP size, platform, scenario, dtype).

    Full weights are materialized once and sharded by views; replicated linears are built and loaded
    once and shared by all in-process ranks (every rank would hold identical bytes and kernel state).
    The TP size is validated by the entry point that builds (`cfg.check_tp`, once per call), not here.

    An executor that shares loaded linears between builds passes ``full_weights`` (a dict it keeps: the
    unsharded weights do not depend on TP size or scenario), ``linear_class`` (a QuantizedLinear that
    remembers results) and ``linear_source(builder, spec, rank)``, which returns the rank's loaded linear
    (calling `builder.load_linear` for one it does not hold yet).
    """

    def __init__(
        self,
        cfg,
        ckpt,
        tp_size: int,
        plat: Platform | str,
        scen: Scenario,
        dtype: torch.dtype,
        policy: KernelPolicy | None = None,
        *,
        full_weights: dict[str, object] | None = None,
        linear_class: type[QuantizedLinear] = QuantizedLinear,
        linear_source: Callable[[LayerBuilder, LinearSpec, int], object] | None = None,
    ) -> None:
        if ckpt.cfg.arch != cfg.arch:
            raise ValueError(f"checkpoint is a {ckpt.cfg.arch} layer but the config {cfg.name!r} is {cfg.arch}")
        self.cfg, self.ckpt, self.tp_size = cfg, ckpt, tp_size
        self.platform = platform(plat)
        # Everything downstream reads plain fields: an engine profile's rules are applied here, once.
        self.scenario = scen.resolve(self.platform)
        self.dtype = dtype
        self.policy = policy or self.scenario.policy(self.platform)
        self.full_weights = {} if full_weights is None else full_weights
        self.linear_class = linear_class
        self._linear_source = linear_source
        self._replicated: dict[str, object] = {}

    def full_weight(self, spec: LinearSpec):
        """The unsharded weight of `spec`, materialized once."""
        if spec.name not in self.full_weights:
            self.full_weights[spec.name] = full_weight(self.ckpt, spec, self.dtype)
        return self.full_weights[spec.name]

    def shard_of(self, spec: LinearSpec, rank: int):
        return shard(self.full_weight(spec), spec, self.tp_size, rank)

    def load_linear(self, spec: LinearSpec, weight):
        """A linear over `weight` (a rank's shard) with the model's flags, loaded: kernel chosen, weight
        processed."""
        flags, events = linear_flags(self.cfg, spec, self.scenario.behaviour, self.platform)
        if isinstance(weight, torch.Tensor):
            linear = DenseLinear(spec.name, weight, **flags)
        else:
            # The checkpoint's scale format travels with the weight: an engine may quantize the layer's
            # activations by it (`Kernel.input_ue8m0`).
            linear = self.linear_class(spec.name, weight, scale_fmt=self.cfg.scale_fmt, **flags)
        linear.events.extend(events)
        return linear.load(self.policy, self.platform)

    def linear(self, spec: LinearSpec, rank: int):
        """Rank `rank`'s loaded linear of `spec`."""
        if self._linear_source is not None:
            return self._linear_source(self, spec, rank)
        if spec.parallel == REPLICATED and spec.name in self._replicated:
            return self._replicated[spec.name]
        linear = self.load_linear(spec, self.shard_of(spec, rank))
        if spec.parallel == REPLICATED:
            self._replicated[spec.name] = linear
        return linear

    def rank_layer(self, rank: int) -> RankLayer:
        if not 0 <= rank < self.tp_size:
            raise ValueError(f"rank {rank} is outside 0..{self.tp_size - 1}")
        linears = {spec.name: self.linear(spec, rank) for spec in linear_specs(self.cfg)}
        norms = {name: self.ckpt.norm_weight(name) for name in norm_names(self.cfg)}
        behaviour = self.scenario.behaviour
        if self.cfg.arch == "v4":
            prepare_model_side(linears, behaviour, self.platform.is_rocm)
            cls = AttentionV4Rank
        else:
            cls = MLAv3Rank
        layer = cls(self.cfg, linears, norms, rank, self.tp_size, self.dtype, behaviour)
        layer.load_events = load_order_events(self.cfg, linears, behaviour)
        return layer

    def rank_layers(self) -> list[RankLayer]:
        return [self.rank_layer(rank) for rank in range(self.tp_size)]
