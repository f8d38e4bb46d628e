"""DeepSeek-V3/R1 and Kimi-K2 MLA attention, one rank, in vLLM's order of ops (docs/semantics.md §9).

Step names (stable; analysis and notebooks key on them):

prefill ("naive"): fused_qkv_a, q_a_layernorm, kv_a_layernorm, q_b_proj, rope, kv_b_proj, attention,
                   o_proj, all_reduce
decode ("absorbed"): fused_qkv_a, q_a_layernorm, kv_a_layernorm, q_b_proj, rope, absorb_uk, attention,
                   absorb_uv, o_proj, all_reduce

Decode treats every given token as a new query (batched decode / MTP verify) against a latent cache
holding all given tokens (each token sees cache entries at positions <= its own). In exact arithmetic
both modes give the same output. The absorbed path builds W_UK / W_UV from kv_b_proj's RAW weight
bytes (a direct reader), so a kernel that re-laid those bytes out corrupts decode only - when the
derivation reads them after the kernel's load (`model.load_order`). How W_UK / W_UV are rounded and
multiplied is `ModelBehaviour.absorbed_weight_dtype` / ``absorbed_bmm`` (`model.absorbed`).

With ``ModelBehaviour.v3_fused_norm_quant`` (vLLM 0.33.0's compile pass ``MLADualRMSGroupQuantPattern``,
``compilation/passes/fusion/rocm_aiter_fusion.py``), q_a_layernorm and kv_a_layernorm are one
``fused_qk_rmsnorm_group_quant`` (`model.fused_producer`, the mechanism DeepSeek-V4's q_norm uses) whose
quantized q feeds q_b_proj. The pass replaces a pattern, not a consumer's wish: it is registered for
eps 1e-5 and 1e-6 only, and matches q_a_layernorm followed by a ROW_MAJOR 1x128 group quant
(``MatcherQuantFP8`` without column-major scales) - a q_b_proj kernel that quantizes its input
column-major keeps the unfused path. The fused kernel writes ``transpose_scale=False`` (ROW_MAJOR).
"""

from __future__ import annotations

import torch

from ..layouts import ScaleLayout
from .absorbed import AbsorbedWeights, build_absorbed_weights, identity_read
from .attention_math import attend, causal_mask
from .fused_producer import OP, UNFUSED, ProducerLayer, ProducerPlan, consumer_orders, written_layout
from .linear import QuantizedLinear
from .load_order import absorbed_derived_before_kernel_load, absorbed_reader
from .norms import rms_norm
from .program import Step
from .records import CONCAT, REPLICATED
from .rope import cos_sin, rope_is_interleaved, rope_label, rotate

CONSUMERS = ("q_b_proj",)
# The epsilons vLLM 0.33.0 registers MLADualRMSGroupQuantPattern for (MLADualRMSNormFusionPass.__init__).
FUSION_PATTERN_EPSILONS = (1e-5, 1e-6)


def _held(linear: QuantizedLinear) -> str:
    """What the identity read multiplied: the checkpoint's weight, or the one the kernel re-quantized at load."""
    weight = linear.block.weight
    if weight is linear.loaded_weight:
        return ""
    powers_of_two = bool((torch.frexp(weight.scale)[0] == 0.5).all())
    return ", of the weight its kernel re-quantized at load" + (" (ue8m0 block scales)" if powers_of_two else "")


class MLAv3Rank(ProducerLayer):
    """One tensor-parallel rank of an MLA layer: heads [rank * Nh/t, (rank + 1) * Nh/t); q_a_layernorm
    may be the fused producer of q_b_proj's input."""

    CONSUMERS = CONSUMERS

    def steps(self, mode: str) -> list[Step]:
        head = [
            Step("fused_qkv_a", self._fused_qkv_a, state_key="qkv_a"),
            self.norm_step("q_a_layernorm", self._q_a_layernorm, state_key="q_c"),
            Step("kv_a_layernorm", self._kv_a_layernorm, state_key="kv_c"),
            Step("q_b_proj", self._q_b_proj, state_key="q"),
            Step("rope", self._rope, state_key="q"),
        ]
        if mode == "prefill":
            middle = [
                Step("kv_b_proj", self._kv_b_proj, state_key="kv"),
                Step("attention", self._attention_naive, state_key="attn"),
            ]
        else:
            middle = [
                Step("absorb_uk", self._absorb_uk, state_key="q_latent"),
                Step("attention", self._attention_absorbed, state_key="attn_latent"),
                Step("absorb_uv", self._absorb_uv, state_key="attn"),
            ]
        return head + middle + [Step("o_proj", self._o_proj, state_key="partial"), self.all_reduce_step()]

    # -- shared front -----------------------------------------------------------------------------
    def _fused_qkv_a(self, s: dict):
        call = self.linears["fused_qkv_a_proj"].run(s["hidden"])
        s["qkv_a"] = call.output
        return self.linear_record("fused_qkv_a", call, REPLICATED)

    # -- the q-lora producer: plain RMSNorm, or the fused norm+quant of vLLM 0.33's compile pass --------
    def _producer_plan(self) -> ProducerPlan:
        """Whether q_a_layernorm is the fused producer feeding q_b_proj, and the scale order it writes."""
        b = self.behaviour
        if not b.v3_fused_norm_quant:
            return UNFUSED
        wants = consumer_orders(self.linears, CONSUMERS)
        if wants is None:
            return UNFUSED
        written = written_layout(b.v3_fused_transpose_scale, b.fused_scale_strided)
        eps = self.cfg.rms_norm_eps
        if eps not in FUSION_PATTERN_EPSILONS:
            note = f"rms_norm_eps={eps:g} is not an epsilon the compile pass registers its pattern for (1e-5, 1e-6)"
            return ProducerPlan(False, written, (f"{note}: q_a_layernorm stays unfused",))
        own = wants["q_b_proj"]
        if own is not ScaleLayout.ROW_MAJOR:
            note = (
                f"q_b_proj's kernel quantizes its input with {own.name} scales and the compile pass matches only "
                "a ROW_MAJOR 1x128 group quant"
            )
            return ProducerPlan(False, written, (f"{note}: q_a_layernorm stays unfused",))
        return ProducerPlan(True, written)

    def _q_a_layernorm(self, s: dict):
        cfg = self.cfg
        lq, lkv = cfg.q_lora_rank, cfg.kv_lora_rank
        plan = self._producer_plan()
        if not plan.fused:
            s["q_c"] = rms_norm(s["qkv_a"][:, :lq], self.norms["q_a_layernorm"], cfg.rms_norm_eps)
            return self.record("q_a_layernorm", s["q_c"], kernel="rmsnorm", notes=list(plan.notes))
        fmt = self.linears["q_b_proj"].block.weight.fmt
        q_c, kv_c = s["qkv_a"][:, :lq], s["qkv_a"][:, lq : lq + lkv]
        result, backend = self.run_producer(q_c, "q_a_layernorm", kv_c, "kv_a_layernorm", plan, fmt)
        s["q_c"], s["q_c_quant"], s["kv_c_fused"] = result.q_unquantized, result.q_quant, result.k_normed
        return self.producer_record("q_a_layernorm", result, backend, plan)

    def _kv_a_layernorm(self, s: dict):
        lq, lkv = self.cfg.q_lora_rank, self.cfg.kv_lora_rank
        s["k_pe_raw"] = s["qkv_a"][:, lq + lkv :]
        if "kv_c_fused" in s:
            s["kv_c"] = s["kv_c_fused"]
            return self.record("kv_a_layernorm", s["kv_c"], kernel=OP)
        s["kv_c"] = rms_norm(s["qkv_a"][:, lq : lq + lkv], self.norms["kv_a_layernorm"], self.cfg.rms_norm_eps)
        return self.record("kv_a_layernorm", s["kv_c"], kernel="rmsnorm")

    def _q_b_proj(self, s: dict):
        # The fused producer's FP8 output when there is one (read in q_b_proj's kernel's own order).
        call = self.linears["q_b_proj"].run(s.get("q_c_quant", s["q_c"]))
        s["q"] = call.output.view(-1, self.local_heads, self.cfg.qk_head_dim)
        return self.linear_record("q_b_proj", call, CONCAT, gather_dim=-1)

    def _rope(self, s: dict):
        p = self.cfg.qk_nope_head_dim
        interleaved = rope_is_interleaved(self.cfg, self.behaviour)
        cos, sin = cos_sin(self.cfg, s["positions"])
        q = s["q"].clone()
        q[..., p:] = rotate(q[..., p:], cos, sin, interleaved)
        s["q"] = q
        s["k_pe"] = rotate(s["k_pe_raw"], cos, sin, interleaved)
        return self.record(
            "rope",
            q,
            CONCAT,
            gather_dim=1,
            kernel=rope_label(interleaved, self.cfg),
            extras={"k_pe": s["k_pe"]},
        )

    # -- prefill ("naive") ------------------------------------------------------------------------
    def _kv_b_proj(self, s: dict):
        call = self.linears["kv_b_proj"].run(s["kv_c"])
        s["kv"] = call.output.view(-1, self.local_heads, self.cfg.qk_nope_head_dim + self.cfg.v_head_dim)
        return self.linear_record("kv_b_proj", call, CONCAT, gather_dim=-1)

    def _attention_naive(self, s: dict):
        cfg = self.cfg
        p = cfg.qk_nope_head_dim
        k_nope, v = s["kv"][..., :p], s["kv"][..., p:]
        k_pe = s["k_pe"].unsqueeze(1).expand(-1, self.local_heads, -1)
        k = torch.cat((k_nope, k_pe.to(k_nope.dtype)), dim=-1)
        mask = causal_mask(s["positions"], s["positions"])
        s["attn"] = attend(s["q"], k, v, cfg.softmax_scale, mask).to(self.dtype)
        return self.record("attention", s["attn"], CONCAT, gather_dim=1, kernel="attention (naive MHA, fp32)")

    # -- decode ("absorbed") ----------------------------------------------------------------------
    def _absorbed_weights(self, s: dict) -> AbsorbedWeights:
        """W_UK (h, P, Lkv) and W_UV (h, V, Lkv) from kv_b_proj's raw bytes - as they were when the engine
        derived them (`model.load_order`) - built and multiplied as the behaviour says (`model.absorbed`)."""
        if "absorbed" not in s:
            cfg, b = self.cfg, self.behaviour
            linear = self.linears["kv_b_proj"]
            before = absorbed_derived_before_kernel_load(b)
            quantized = isinstance(linear, QuantizedLinear)
            if b.absorbed_weights_via == "kernel-identity" and quantized:
                if before:
                    raise ValueError(
                        "kv_b_proj: absorbed_weights_via='kernel-identity' runs the loaded kernel on an identity, "
                        "but absorbed_weights_derived='before-kernel-load' derives W_UK/W_UV before any kernel "
                        "loaded; the two cannot hold together"
                    )
                weight, call = identity_read(linear)
                s["absorbed_kernel"] = (
                    f"bmm (W_UK/W_UV from kv_b_proj's kernel on an identity: {call.kernel}{_held(linear)})"
                )
                s["absorbed_layout"] = call.weight_layout
                s["direct_violations"] = list(call.violations)
            else:
                weight, violation = linear.read_direct(absorbed_reader(b), before_kernel_load=before)
                s["absorbed_layout"] = linear.direct_read_layout(before)
                s["direct_violations"] = [violation] if violation else []
            fmt = linear.block.weight.fmt if quantized else None
            s["absorbed"] = build_absorbed_weights(
                weight,
                self.local_heads,
                cfg.qk_nope_head_dim,
                cfg.v_head_dim,
                cfg.kv_lora_rank,
                b.absorbed_weight_dtype,
                b.absorbed_bmm,
                fmt,
            )
        return s["absorbed"]

    def _absorb_record(self, name: str, output, s: dict):
        return self.record(
            name,
            output,
            CONCAT,
            gather_dim=1,
            kernel=s.get("absorbed_kernel", "bmm (direct read of kv_b_proj)"),
            weight_layout=s["absorbed_layout"],
            violations=list(s["direct_violations"]),
        )

    def _absorb_uk(self, s: dict):
        absorbed = self._absorbed_weights(s)
        s["q_latent"] = absorbed.absorb_uk(s["q"][..., : self.cfg.qk_nope_head_dim]).to(self.dtype)
        return self._absorb_record("absorb_uk", s["q_latent"], s)

    def _attention_absorbed(self, s: dict):
        cfg = self.cfg
        q = torch.cat((s["q_latent"], s["q"][..., cfg.qk_nope_head_dim :]), dim=-1)
        cache = torch.cat((s["kv_c"], s["k_pe"].to(s["kv_c"].dtype)), dim=-1)
        mask = causal_mask(s["positions"], s["positions"])
        s["attn_latent"] = attend(q, cache, s["kv_c"], cfg.softmax_scale, mask).to(self.dtype)
        return self.record(
            "attention", s["attn_latent"], CONCAT, gather_dim=1, kernel="attention (MQA over the latent cache, fp32)"
        )

    def _absorb_uv(self, s: dict):
        absorbed = self._absorbed_weights(s)
        s["attn"] = absorbed.absorb_uv(s["attn_latent"]).to(self.dtype)
        return self._absorb_record("absorb_uv", s["attn"], s)

    # -- output -----------------------------------------------------------------------------------
    def _o_proj(self, s: dict):
        call = self.linears["o_proj"].run(s["attn"].reshape(s["attn"].shape[0], -1))
        return self.partial_record("o_proj", call, s)
