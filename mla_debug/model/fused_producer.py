"""The fused RMSNorm + FP8 group-quant producer that hands a q projection its input pre-quantized - one
mechanism for both model families that have one:

- DeepSeek-V4 on ROCm (vLLM PR #53540): ``q_norm`` feeds ``wq_b`` and ``indexer.wq_b``;
- DeepSeek-V3 under vLLM 0.33.0's compile pass ``MLADualRMSGroupQuantPattern``: ``q_a_layernorm`` (with
  ``kv_a_layernorm`` in the same kernel) feeds ``q_b_proj``.

Each model is a `ProducerLayer` and decides a `ProducerPlan` once per rank layer (fused or not, the scale
order written, notes and producer-side violations) from its behaviour and its consumers' kernels; the run
is always `normquant.fused_qk_rmsnorm_group_quant` on the backend ``ModelBehaviour.norm_quant_backend``
names, and the step it records looks the same for both. The consumers then read the producer's
`QuantizedActivation` in their own order: a kernel reading another order records a scale-order violation.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, replace

import torch

from ..layouts import ContractViolation, QuantizedActivation, ScaleLayout, ScaleRead
from ..normquant import NormQuantResult, fused_qk_rmsnorm_group_quant, resolve_backend
from ..numerics import Fp8Format
from .linear import QuantizedLinear
from .program import RankLayer, Step
from .records import StepRecord

OP = "fused_qk_rmsnorm_group_quant"


@dataclass(frozen=True)
class ProducerPlan:
    """Whether a layer's q-side norm is the fused producer, the scale order it writes, why (notes), and
    the contracts broken at the producer itself (e.g. consumers that disagree)."""

    fused: bool
    layout: ScaleLayout = ScaleLayout.ROW_MAJOR
    notes: tuple[str, ...] = ()
    violations: tuple[ContractViolation, ...] = ()


UNFUSED = ProducerPlan(False)


def written_layout(transpose_scale: bool, strided: bool = False) -> ScaleLayout:
    """The scale order the fused kernel writes: with ``transpose_scale`` column-major bytes, presented as
    COL_MAJOR ("view", aiter before ROCm/aiter PR #4506) or, `strided`, with strides (1, M)
    (COL_MAJOR_STRIDED: aiter after #4506, or a consumer's restride); else ROW_MAJOR."""
    if not transpose_scale:
        return ScaleLayout.ROW_MAJOR
    return ScaleLayout.COL_MAJOR_STRIDED if strided else ScaleLayout.COL_MAJOR


def consumer_orders(linears: dict, names: tuple[str, ...]) -> dict[str, ScaleLayout] | None:
    """{consumer: the activation-scale order its kernel reads - and writes when it quantizes its own
    input}; None when a consumer is not quantized (there is nothing to pre-quantize for)."""
    consumers = [linears[name] for name in names]
    if not all(isinstance(c, QuantizedLinear) for c in consumers):
        return None
    return {name: c.block.kernel.contract(c.block).scale for name, c in zip(names, consumers)}


def producer_step(name: str, run, consumers: str) -> Step:
    """The producer's step: its consumers read its FP8 data and scales, which the recorded (unquantized)
    output does not determine, so replacing the record would not reach them."""
    return Step(
        name,
        run,
        fixed=f"the fused norm+quant producer's consumers ({consumers}) read its FP8 data and scales, "
        "not the unquantized output it records",
    )


class ProducerLayer(RankLayer):
    """An attention rank layer whose q-side norm may be the fused producer of its `CONSUMERS`' input.

    The plan is settled once, when the layer is built from loaded linears, so that `steps()` reads no
    linear: a run's account of which linears each step read stays exact."""

    CONSUMERS: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._producer = self._producer_plan()

    @abstractmethod
    def _producer_plan(self) -> ProducerPlan:
        """Whether the q-side norm is the fused producer, the scale order it writes, notes, violations."""

    @property
    def local_heads(self) -> int:
        return self.cfg.num_heads // self.tp_size

    def norm_step(self, name: str, run, state_key: str) -> Step:
        """The q-side norm's step: the producer's (`producer_step`) when fused, else a plain step whose
        output later steps read from ``state[state_key]``."""
        if not self._producer.fused:
            return Step(name, run, state_key=state_key)
        return producer_step(name, run, " and ".join(self.CONSUMERS))

    def run_producer(
        self,
        q: torch.Tensor,
        q_norm: str,
        k: torch.Tensor,
        k_norm: str,
        plan: ProducerPlan,
        fmt: Fp8Format,
    ) -> tuple[NormQuantResult, str]:
        """Normalize `q` and `k` (norm weights by name, the config's eps) and quantize q per 1x128 in the
        plan's scale order; returns the result (with the unquantized normalized q) and the backend used."""
        eps = self.cfg.rms_norm_eps
        backend = resolve_backend(self.behaviour.norm_quant_backend, q.device)
        result = fused_qk_rmsnorm_group_quant(
            q,
            self.norms[q_norm],
            eps,
            k,
            self.norms[k_norm],
            eps,
            transpose_scale=plan.layout is not ScaleLayout.ROW_MAJOR,
            fmt=fmt,
            return_unquantized=True,
            backend=backend,
        )
        if plan.layout is ScaleLayout.COL_MAJOR_STRIDED:
            result = result._replace(q_quant=restrided(result.q_quant))
        return result, backend

    def producer_record(self, name: str, result: NormQuantResult, backend: str, plan: ProducerPlan) -> StepRecord:
        """The producer step's record: the normalized q it also returns, the layout written, the dequantized
        FP8 output as an extra."""
        return self.record(
            name,
            result.q_unquantized,
            kernel=f"{OP} ({backend})",
            scale_layout=ScaleRead(plan.layout),
            notes=list(plan.notes),
            violations=list(plan.violations),
            extras={"q_fp8_dequantized": result.q_quant.dequantize()},
        )


def restrided(qa: QuantizedActivation) -> QuantizedActivation:
    """A COL_MAJOR ("view") activation presented with the strides of its bytes, (1, M), over the same storage
    - what aiter's fixed wrapper and SGLang's ``view_aiter_fused_rms_transposed_fp8_scale`` return."""
    if qa.scale_layout is not ScaleLayout.COL_MAJOR:
        return qa
    m, g = qa.scale.shape
    view = torch.as_strided(qa.scale, (m, g), (1, m), qa.scale.storage_offset())
    return replace(qa, scale=view, scale_layout=ScaleLayout.COL_MAJOR_STRIDED)
