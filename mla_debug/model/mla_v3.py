"""DeepSeek-V3/R1 and Kimi-K2 MLA attention, one rank, in vLLM's order of ops (SEMANTICS 7).

Step names (stable; analysis and notebooks key on them):

prefill ("naive"): fused_qkv_a, q_a_layernorm, kv_a_layernorm, q_b_proj, rope, kv_b_proj, attention,
                   o_proj, all_reduce
decode ("absorbed"): fused_qkv_a, q_a_layernorm, kv_a_layernorm, q_b_proj, rope, absorb_uk, attention,
                   absorb_uv, o_proj, all_reduce

Decode treats every given token as a new query (batched decode / MTP verify) against a latent cache
holding all given tokens (each token sees cache entries at positions <= its own). In exact arithmetic
both modes give the same output. The absorbed path builds W_UK / W_UV from kv_b_proj's RAW weight
bytes (a direct reader), so a kernel that re-laid those bytes out corrupts decode only.
"""

from __future__ import annotations

import torch

from .attention_math import attend, causal_mask
from .norms import rms_norm
from .program import RankLayer, Step
from .records import CONCAT, REPLICATED
from .rope import cos_sin, rotate_interleaved


class MLAv3Rank(RankLayer):
    """One tensor-parallel rank of an MLA layer: heads [rank * Nh/t, (rank + 1) * Nh/t)."""

    @property
    def local_heads(self) -> int:
        return self.cfg.num_heads // self.tp_size

    def steps(self, mode: str) -> list[Step]:
        head = [
            Step("fused_qkv_a", self._fused_qkv_a, state_key="qkv_a"),
            Step("q_a_layernorm", self._q_a_layernorm, state_key="q_c"),
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

    def _q_a_layernorm(self, s: dict):
        lq = self.cfg.q_lora_rank
        s["q_c"] = rms_norm(s["qkv_a"][:, :lq], self.norms["q_a_layernorm"], self.cfg.rms_norm_eps)
        return self.record("q_a_layernorm", s["q_c"], kernel="rmsnorm")

    def _kv_a_layernorm(self, s: dict):
        lq, lkv = self.cfg.q_lora_rank, self.cfg.kv_lora_rank
        s["kv_c"] = rms_norm(s["qkv_a"][:, lq : lq + lkv], self.norms["kv_a_layernorm"], self.cfg.rms_norm_eps)
        s["k_pe_raw"] = s["qkv_a"][:, lq + lkv :]
        return self.record("kv_a_layernorm", s["kv_c"], kernel="rmsnorm")

    def _q_b_proj(self, s: dict):
        call = self.linears["q_b_proj"].run(s["q_c"])
        s["q"] = call.output.view(-1, self.local_heads, self.cfg.qk_head_dim)
        return self.linear_record("q_b_proj", call, CONCAT, gather_dim=-1)

    def _rope(self, s: dict):
        p = self.cfg.qk_nope_head_dim
        cos, sin = cos_sin(self.cfg, s["positions"])
        q = s["q"].clone()
        q[..., p:] = rotate_interleaved(q[..., p:], cos, sin)
        s["q"] = q
        s["k_pe"] = rotate_interleaved(s["k_pe_raw"], cos, sin)
        return self.record(
            "rope",
            q,
            CONCAT,
            gather_dim=1,
            kernel="rope (GPT-J interleaved, deepseek-yarn)",
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
    def _absorbed_weights(self, s: dict):
        """W_UK (h, P, Lkv) and W_UV (h, V, Lkv) from kv_b_proj's raw bytes, as vLLM builds them."""
        if "w_uk" not in s:
            cfg = self.cfg
            weight, violation = self.linears["kv_b_proj"].read_direct("absorbed decode (W_UK/W_UV)")
            per_head = weight.view(self.local_heads, cfg.qk_nope_head_dim + cfg.v_head_dim, cfg.kv_lora_rank)
            s["w_uk"], s["w_uv"] = per_head[:, : cfg.qk_nope_head_dim], per_head[:, cfg.qk_nope_head_dim :]
            s["direct_violations"] = [violation] if violation else []
        return s["w_uk"], s["w_uv"]

    def _absorb_uk(self, s: dict):
        w_uk, _ = self._absorbed_weights(s)
        q_nope = s["q"][..., : self.cfg.qk_nope_head_dim].to(torch.float32)
        s["q_latent"] = torch.einsum("mhp,hpc->mhc", q_nope, w_uk).to(self.dtype)
        layout = self.linears["kv_b_proj"].weight_layout
        return self.record(
            "absorb_uk",
            s["q_latent"],
            CONCAT,
            gather_dim=1,
            kernel="bmm (direct read of kv_b_proj)",
            weight_layout=layout,
            violations=list(s["direct_violations"]),
        )

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
        _, w_uv = self._absorbed_weights(s)
        s["attn"] = torch.einsum("mhc,hvc->mhv", s["attn_latent"].to(torch.float32), w_uv).to(self.dtype)
        layout = self.linears["kv_b_proj"].weight_layout
        return self.record(
            "absorb_uv",
            s["attn"],
            CONCAT,
            gather_dim=1,
            kernel="bmm (direct read of kv_b_proj)",
            weight_layout=layout,
            violations=list(s["direct_violations"]),
        )

    # -- output -----------------------------------------------------------------------------------
    def _o_proj(self, s: dict):
        call = self.linears["o_proj"].run(s["attn"].reshape(s["attn"].shape[0], -1))
        return self.partial_record("o_proj", call, s)
