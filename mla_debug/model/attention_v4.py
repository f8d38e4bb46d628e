"""DeepSeek-V4 attention, one rank (docs/semantics.md §10), with the ROCm model-side behaviours as options.

Step names: fused_wqa_wkv, q_norm, kv_norm, wq_b, q_head_norm, indexer_q, rope, attention,
inverse_rope, wo_a, wo_b, all_reduce (the same for prefill and decode: every token is a query).

The attention core is deliberately simple: causal sliding-window MQA over the one shared KV head (keys
and values are the normalized, roped kv), softmax scale head_dim^-0.5. The compressor and sparse top-k
selection are out of scope; the indexer query is still computed because it is the second consumer of
the shared pre-quantized q-lora. On the output, RoPE is undone on the rope slice, then wo_a runs as a
grouped BMM that reads its weight directly (``is_bmm``), then wo_b (row-parallel) and the all-reduce.
"""

from __future__ import annotations

import torch

from ..kernels import get_kernel
from ..layouts import ConsumerOrders, ContractViolation, ScaleLayout, ViolationKind
from .attention_math import attend, causal_mask
from .fused_producer import UNFUSED, ProducerLayer, ProducerPlan, consumer_orders, written_layout
from .linear import QuantizedLinear
from .norms import rms_norm
from .program import Step
from .records import CONCAT, REPLICATED
from .rope import cos_sin, rope_is_interleaved, rope_label, rotate

CONSUMERS = ("wq_b", "indexer.wq_b")
MODEL_SHUFFLED = ("fused_wqa_wkv", "wo_b")


def prepare_model_side(linears: dict, behaviour, is_rocm: bool) -> None:
    """The ROCm V4 model's own preshuffle of fused_wqa_wkv and wo_b, with direct bpreshuffle calls.

    After vLLM PR #56433 the model skips its shuffle when the kernel already preshuffled the weight; it
    learns that from the layer's ``aiter_bpreshuffled`` flag, which a kernel sets when it shuffles at load
    (vLLM 0.33 ``models/deepseek_v4/amd/rocm.py`` reads the same flag before its ``shuffle_weight``).
    """
    if not (behaviour.v4_model_preshuffle and is_rocm):
        return
    for name in MODEL_SHUFFLED:
        linear = linears[name]
        if not isinstance(linear, QuantizedLinear) or linear.k % 128 or linear.n % 16:
            continue
        if getattr(linear, "direct_kernel", None) is not None or getattr(linear, "model_prepared", False):
            continue  # a replicated linear shared by in-process ranks is prepared once
        block = linear.block
        if not (behaviour.skip_model_shuffle_if_kernel_preshuffles and block.aiter_bpreshuffled):
            block.shuffle_weight((16, 16), by="model prepare_attn_preshuffle")
        linear.model_prepared = True
        if name == "fused_wqa_wkv" and not behaviour.v4_wqa_wkv_override:
            block.events.append(
                "the model's call of the preshuffled GEMM is bypassed: the linear's own kernel reads it"
            )
            continue
        linear.direct_kernel = get_kernel("aiter-bpreshuffle")
        block.events.append("model calls gemm_a8w8_blockscale_bpreshuffle directly")


class AttentionV4Rank(ProducerLayer):
    """One rank: heads [rank * Nh/t, ...), output groups [rank * G/t, ...); q_norm may be the fused
    producer of wq_b's and indexer.wq_b's input."""

    CONSUMERS = CONSUMERS

    @property
    def local_groups(self) -> int:
        return self.cfg.o_groups // self.tp_size

    def steps(self, mode: str) -> list[Step]:
        return [
            Step("fused_wqa_wkv", self._fused_wqa_wkv, state_key="wqa_wkv"),
            self.norm_step("q_norm", self._q_norm, state_key="qr"),
            Step("kv_norm", self._kv_norm, state_key="kv"),
            Step("wq_b", self._wq_b, state_key="q"),
            Step("q_head_norm", self._q_head_norm, state_key="q"),
            Step("indexer_q", self._indexer_q),  # the sparse selection it feeds is out of scope: no reader
            Step("rope", self._rope, state_key="q"),
            Step("attention", self._attention, state_key="attn"),
            Step("inverse_rope", self._inverse_rope, state_key="attn"),
            Step("wo_a", self._wo_a, state_key="o_a"),
            Step("wo_b", self._wo_b, state_key="partial"),
            self.all_reduce_step(),
        ]

    def _run(self, name: str, x):
        linear = self.linears[name]
        return (
            linear.run(x, kernel=getattr(linear, "direct_kernel", None))
            if isinstance(linear, QuantizedLinear)
            else linear.run(x)
        )

    def _fused_wqa_wkv(self, s: dict):
        call = self._run("fused_wqa_wkv", s["hidden"])
        s["wqa_wkv"] = call.output
        return self.linear_record("fused_wqa_wkv", call, REPLICATED)

    # -- the producer of the shared q-lora ----------------------------------------------------------
    def _producer_plan(self) -> ProducerPlan:
        """The q-lora producer: fused or not, the scale order it writes, notes, producer-side violations."""
        b = self.behaviour
        wants = consumer_orders(self.linears, CONSUMERS)
        if not b.v4_fused_norm_quant or wants is None:
            return UNFUSED
        written = written_layout(b.v4_fused_transpose_scale, b.fused_scale_strided)
        wanted = ", ".join(f"{name} reads {layout.name}" for name, layout in wants.items())
        if b.v4_ask_consumers:
            orders = set(wants.values())
            if len(orders) > 1 or next(iter(orders)) not in (ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR):
                notes = (f"consumers disagree ({wanted}): fused norm+quant abandoned for the unfused path",)
                return ProducerPlan(False, written, notes)
            return ProducerPlan(True, next(iter(orders)), (f"consumers asked ({wanted})",))
        violations = ()
        if len({layout.byte_order for layout in wants.values()}) > 1:
            violations = (
                ContractViolation(
                    kind=ViolationKind.CONSUMERS_DISAGREE,
                    consumer=" and ".join(CONSUMERS),
                    module="q_norm",
                    operand="output",
                    expected=None,
                    found=ConsumerOrders(tuple(wants.items())),
                    effective=True,
                ),
            )
        return ProducerPlan(True, written, (), violations)

    def _q_norm(self, s: dict):
        cfg = self.cfg
        qr = s["wqa_wkv"][:, : cfg.q_lora_rank]
        plan = self._producer_plan()
        if not plan.fused:
            s["qr"] = rms_norm(qr, self.norms["q_norm"], cfg.rms_norm_eps)
            return self.record("q_norm", s["qr"], kernel="rmsnorm (unfused, bf16)", notes=list(plan.notes))
        kv = s["wqa_wkv"][:, cfg.q_lora_rank :]
        fmt = self.linears["wq_b"].block.weight.fmt
        result, backend = self.run_producer(qr, "q_norm", kv, "kv_norm", plan, fmt)
        s["qr"], s["qr_quant"], s["kv_fused"] = result.q_unquantized, result.q_quant, result.k_normed
        return self.producer_record("q_norm", result, backend, plan)

    def _kv_norm(self, s: dict):
        if "kv_fused" in s:
            s["kv"] = s["kv_fused"]
            return self.record("kv_norm", s["kv"], kernel="fused_qk_rmsnorm_group_quant")
        kv = s["wqa_wkv"][:, self.cfg.q_lora_rank :]
        s["kv"] = rms_norm(kv, self.norms["kv_norm"], self.cfg.rms_norm_eps)
        return self.record("kv_norm", s["kv"], kernel="rmsnorm (unfused, bf16)")

    def _consumer_input(self, s: dict):
        """The pre-quantized q-lora when fused (both consumers get the same buffer), else bf16 qr."""
        return s.get("qr_quant", s["qr"])

    def _wq_b(self, s: dict):
        call = self._run("wq_b", self._consumer_input(s))
        s["q"] = call.output.view(-1, self.local_heads, self.cfg.head_dim)
        return self.linear_record("wq_b", call, CONCAT, gather_dim=-1)

    def _q_head_norm(self, s: dict):
        s["q"] = rms_norm(s["q"], None, self.cfg.rms_norm_eps)
        return self.record("q_head_norm", s["q"], CONCAT, gather_dim=1, kernel="rmsnorm per head (unweighted)")

    def _indexer_q(self, s: dict):
        call = self._run("indexer.wq_b", self._consumer_input(s))
        return self.linear_record("indexer_q", call, REPLICATED)

    def _rope(self, s: dict):
        r = self.cfg.qk_rope_head_dim
        interleaved = rope_is_interleaved(self.cfg, self.behaviour)
        cos, sin = cos_sin(self.cfg, s["positions"])
        q, kv = s["q"].clone(), s["kv"].clone()
        q[..., -r:] = rotate(q[..., -r:], cos, sin, interleaved)
        kv[..., -r:] = rotate(kv[..., -r:], cos, sin, interleaved)
        s["q"], s["kv"] = q, kv
        label = rope_label(interleaved, self.cfg)
        return self.record("rope", q, CONCAT, gather_dim=1, kernel=label, extras={"kv": kv})

    def _attention(self, s: dict):
        mask = causal_mask(s["positions"], s["positions"], self.cfg.sliding_window or None)
        s["attn"] = attend(s["q"], s["kv"], s["kv"], self.cfg.softmax_scale, mask).to(self.dtype)
        return self.record(
            "attention", s["attn"], CONCAT, gather_dim=1, kernel="attention (sliding-window MQA, shared KV head, fp32)"
        )

    def _inverse_rope(self, s: dict):
        r = self.cfg.qk_rope_head_dim
        cos, sin = cos_sin(self.cfg, s["positions"])
        out = s["attn"].clone()
        interleaved = rope_is_interleaved(self.cfg, self.behaviour)
        out[..., -r:] = rotate(out[..., -r:], cos, sin, interleaved, inverse=True)
        s["attn"] = out
        return self.record("inverse_rope", out, CONCAT, gather_dim=1, kernel="inverse rope")

    def _wo_a(self, s: dict):
        cfg = self.cfg
        weight, violation = self.linears["wo_a"].read_direct("grouped BMM (wo_a)")
        per_group = cfg.num_heads // cfg.o_groups * cfg.head_dim
        w = weight.view(self.local_groups, cfg.o_lora_rank, per_group)
        x = s["attn"].reshape(-1, self.local_groups, per_group).to(torch.float32)
        s["o_a"] = torch.einsum("mgd,grd->mgr", x, w).reshape(x.shape[0], -1).to(self.dtype)
        return self.record(
            "wo_a",
            s["o_a"],
            CONCAT,
            gather_dim=-1,
            kernel="grouped bmm (direct read of wo_a)",
            weight_layout=self.linears["wo_a"].weight_layout,
            violations=[violation] if violation else [],
        )

    def _wo_b(self, s: dict):
        return self.partial_record("wo_b", self._run("wo_b", s["o_a"]), s)
