"""Module trees shaped like vLLM 0.33.0's and SGLang 0.5.23's DeepSeek MLA attention, for the recipe
tests (neither engine runs here). Attribute names, call signatures and the layouts of the derived
weights are the engines' (data/engines/names/vllm-0.33.yaml and sglang-0.5.23.yaml cite them); the math is
a plain absorbed MLA forward without RoPE, enough to give every hooked op real inputs and outputs.
Weights are an mla_debug synthetic FP8 checkpoint, sharded like the engines shard them.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from mla_debug.model import Checkpoint


def dequantize(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rows = scale.repeat_interleave(128, 0)[: weight.shape[0]]
    return weight.float() * rows.repeat_interleave(128, 1)[:, : weight.shape[1]]


class FakeLinear(nn.Module):
    """An FP8 block-scaled linear that returns (output, bias) as vLLM's and SGLang's linears do."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone(), requires_grad=False)
        self.weight_scale_inv = nn.Parameter(scale.clone(), requires_grad=False)

    def forward(self, x):
        return torch.nn.functional.linear(x.float(), dequantize(self.weight, self.weight_scale_inv)), None


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone(), requires_grad=False)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight.float()


def absorbed_attention(q, kv_c, k_pe, w_uk, w_uv, nope: int) -> torch.Tensor:
    """q (T, h, P+R); w_uk (h, P, L); w_uv (h, L, V) -> (T, h*V), causal."""
    q_nope, q_pe = q[..., :nope], q[..., nope:]
    q_latent = torch.einsum("thp,hpl->thl", q_nope, w_uk)
    scores = torch.einsum("thl,sl->hts", q_latent, kv_c) + torch.einsum("thr,sr->hts", q_pe, k_pe)
    t = q.shape[0]
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    latent = torch.einsum("hts,sl->thl", scores.softmax(-1), kv_c)
    return torch.einsum("thl,hlv->thv", latent, w_uv).reshape(t, -1)


class Shards:
    """One rank's engine weights: fused q_a/kv_a, and the column/row shards of the others."""

    def __init__(self, ckpt: Checkpoint, rank: int, tp_size: int) -> None:
        cfg = self.cfg = ckpt.cfg
        self.heads = cfg.num_heads // tp_size
        t = ckpt.tensors
        self.fused = (
            torch.cat([t["q_a_proj.weight"], t["kv_a_proj_with_mqa.weight"]]),
            torch.cat([t["q_a_proj.weight_scale_inv"], t["kv_a_proj_with_mqa.weight_scale_inv"]]),
        )
        qk, kv = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.qk_nope_head_dim + cfg.v_head_dim
        self.q_b = self._rows(t, "q_b_proj", rank * self.heads * qk, self.heads * qk)
        self.kv_b = self._rows(t, "kv_b_proj", rank * self.heads * kv, self.heads * kv)
        v0, v = rank * self.heads * cfg.v_head_dim, self.heads * cfg.v_head_dim
        self.o = (t["o_proj.weight"][:, v0 : v0 + v], t["o_proj.weight_scale_inv"][:, v0 // 128 : (v0 + v) // 128])
        self.norms = t["q_a_layernorm.weight"], t["kv_a_layernorm.weight"]
        # W_UK (h, P, L) and W_UV (h, V, L) from kv_b_proj's dequantized rows, per head [P nope | V].
        per_head = dequantize(*self.kv_b).view(self.heads, kv, cfg.kv_lora_rank)
        self.w_uk, self.w_uv_t = per_head[:, : cfg.qk_nope_head_dim], per_head[:, cfg.qk_nope_head_dim :]

    @staticmethod
    def _rows(t, name, start, count):
        return t[f"{name}.weight"][start : start + count], t[f"{name}.weight_scale_inv"][start // 128 : (start + count) // 128]


class _Common(nn.Module):
    def _qkv(self, fused, hidden_states):
        cfg = self.cfg
        qkv = fused(hidden_states)[0]
        q_c, kv_lora = qkv.split([cfg.q_lora_rank, cfg.kv_lora_rank + cfg.qk_rope_head_dim], dim=-1)
        q_c = self.q_a_layernorm(q_c)
        kv_c, k_pe = kv_lora.split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
        kv_c = self.kv_a_layernorm(kv_c)
        q = self.q_b_proj(q_c)[0].view(-1, self.heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
        return q, kv_c, k_pe


class FakeMLAAttention(nn.Module):
    """vLLM's MLAAttention: keeps W_UK_T (h, P, L) and W_UV (h, L, V)."""

    def __init__(self, shards: Shards) -> None:
        super().__init__()
        self.nope = shards.cfg.qk_nope_head_dim
        self.W_UK_T = nn.Parameter(shards.w_uk.clone(), requires_grad=False)
        self.W_UV = nn.Parameter(shards.w_uv_t.transpose(1, 2).clone(), requires_grad=False)

    def forward(self, q, kv_c_normed, k_pe, output_shape=None):
        return absorbed_attention(q, kv_c_normed, k_pe, self.W_UK_T, self.W_UV, self.nope)


class DeepseekV2MLAAttention(_Common):
    """vLLM's attention module: forward(positions, hidden_states, llama_4_scaling)."""

    def __init__(self, shards: Shards) -> None:
        super().__init__()
        self.cfg, self.heads = shards.cfg, shards.heads
        self.fused_qkv_a_proj = FakeLinear(*shards.fused)
        self.q_a_layernorm, self.kv_a_layernorm = RMSNorm(shards.norms[0]), RMSNorm(shards.norms[1])
        self.q_b_proj, self.kv_b_proj, self.o_proj = FakeLinear(*shards.q_b), FakeLinear(*shards.kv_b), FakeLinear(*shards.o)
        self.mla_attn = nn.Module()
        self.mla_attn.mla_attn = FakeMLAAttention(shards)

    def forward(self, positions, hidden_states, llama_4_scaling=None):
        q, kv_c, k_pe = self._qkv(self.fused_qkv_a_proj, hidden_states)
        return self.o_proj(self.mla_attn.mla_attn(q, kv_c, k_pe))[0]


class DeepseekV2AttentionMLA(_Common):
    """SGLang's attention module: forward(positions, hidden_states, forward_batch, zero_allocator), with
    w_kc (h, P, L) column-major in its last two dims and w_vc (h, L, V) a transposed view."""

    def __init__(self, shards: Shards) -> None:
        super().__init__()
        self.cfg, self.heads = shards.cfg, shards.heads
        self.fused_qkv_a_proj_with_mqa = FakeLinear(*shards.fused)
        self.q_a_layernorm, self.kv_a_layernorm = RMSNorm(shards.norms[0]), RMSNorm(shards.norms[1])
        self.q_b_proj, self.kv_b_proj, self.o_proj = FakeLinear(*shards.q_b), FakeLinear(*shards.kv_b), FakeLinear(*shards.o)
        self.w_kc = shards.w_uk.transpose(1, 2).contiguous().transpose(1, 2)
        self.w_vc = shards.w_uv_t.contiguous().transpose(1, 2)
        self.w_scale = 1.0

    def forward(self, positions, hidden_states, forward_batch, zero_allocator, **kwargs):
        q, kv_c, k_pe = self._qkv(self.fused_qkv_a_proj_with_mqa, hidden_states)
        attention = absorbed_attention(q, kv_c, k_pe, self.w_kc, self.w_vc, self.cfg.qk_nope_head_dim)
        return self.o_proj(attention)[0]


class FakeModel(nn.Module):
    """`model.layers[i].self_attn`, with the Hugging Face config the engines keep as `model.config`."""

    def __init__(self, attention_class, ckpt: Checkpoint, rank: int, tp_size: int, layers: int = 2) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.layers = nn.ModuleList()
        for _ in range(layers):
            layer = nn.Module()
            layer.self_attn = attention_class(Shards(ckpt, rank, tp_size))
            self.model.layers.append(layer)
        hf = ckpt.cfg.to_hf()
        self.config = SimpleNamespace(to_dict=lambda: dict(hf), model_type="deepseek_v3")

    def forward(self, hidden_states, positions, layer: int = 1, **kwargs):
        return self.model.layers[layer].self_attn(positions=positions, hidden_states=hidden_states, **kwargs)


def fake_vllm_worker(ckpt: Checkpoint, rank: int, tp_size: int):
    """Shaped like vLLM 0.33.0's v1 Worker: rank, parallel_config, model_runner.get_model()."""
    model = FakeModel(DeepseekV2MLAAttention, ckpt, rank, tp_size)
    runner = SimpleNamespace(get_model=lambda: model)
    parallel = SimpleNamespace(tensor_parallel_size=tp_size, pipeline_parallel_size=1)
    return SimpleNamespace(rank=rank, parallel_config=parallel, model_runner=runner), model
