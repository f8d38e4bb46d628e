"""Build the per-rank layers of one run: shard the checkpoint, choose kernels, apply model-side behaviour."""

from __future__ import annotations

import torch

from ..kernels import KernelPolicy, Platform, platform
from ..model.attention_v4 import AttentionV4Rank, prepare_model_side
from ..model.linear import DenseLinear, QuantizedLinear
from ..model.mla_v3 import MLAv3Rank
from ..model.program import RankLayer
from ..scenarios import Scenario
from .sharding import REPLICATED, full_weight, linear_specs, norm_names, shard


class LayerBuilder:
    """Builds rank layers for one (checkpoint, TP size, platform, scenario, dtype).

    Full weights are materialized once and sharded by views; replicated linears are built and loaded
    once and shared by all in-process ranks (every rank would hold identical bytes and kernel state).
    The TP size is validated by the entry point that builds (`cfg.check_tp`, once per call), not here.
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
    ) -> None:
        if ckpt.cfg.arch != cfg.arch:
            raise ValueError(f"checkpoint is a {ckpt.cfg.arch} layer but the config {cfg.name!r} is {cfg.arch}")
        self.cfg, self.ckpt, self.tp_size = cfg, ckpt, tp_size
        self.platform = platform(plat)
        # Everything downstream reads plain fields: an engine profile's rules are applied here, once.
        self.scenario = scen.resolve(self.platform)
        self.dtype = dtype
        self.policy = policy or self.scenario.policy(self.platform)
        self._full: dict[str, object] = {}
        self._replicated: dict[str, object] = {}

    def _linear(self, spec, rank: int):
        if spec.parallel == REPLICATED and spec.name in self._replicated:
            return self._replicated[spec.name]
        if spec.name not in self._full:
            self._full[spec.name] = full_weight(self.ckpt, spec, self.dtype)
        weight = shard(self._full[spec.name], spec, self.tp_size, rank)
        cls = DenseLinear if isinstance(weight, torch.Tensor) else QuantizedLinear
        linear = cls(spec.name, weight, **spec.flags).load(self.policy, self.platform)
        if spec.parallel == REPLICATED:
            self._replicated[spec.name] = linear
        return linear

    def rank_layer(self, rank: int) -> RankLayer:
        if not 0 <= rank < self.tp_size:
            raise ValueError(f"rank {rank} is outside 0..{self.tp_size - 1}")
        linears = {spec.name: self._linear(spec, rank) for spec in linear_specs(self.cfg)}
        norms = {name: self.ckpt.norm_weight(name) for name in norm_names(self.cfg)}
        behaviour = self.scenario.behaviour
        if self.cfg.arch == "v4":
            prepare_model_side(linears, behaviour, self.platform.is_rocm)
            cls = AttentionV4Rank
        else:
            cls = MLAv3Rank
        return cls(self.cfg, linears, norms, rank, self.tp_size, self.dtype, behaviour)

    def rank_layers(self) -> list[RankLayer]:
        return [self.rank_layer(rank) for rank in range(self.tp_size)]
