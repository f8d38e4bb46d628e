"""A small "engine" made of transformers' DeepSeek-V3 attention, for the capture diff and explain tests.

Tensor parallelism is emulated rank by rank, as transformers' tp_plan shards MLA: every rank is a
`DeepseekV3Attention` with Nh/t heads holding its rows of q_b_proj and kv_b_proj and its columns of
o_proj (whose output is then a partial sum). Defects are planted into the loaded modules the way an
engine bug would: aiter's own `shuffle_weight` (amd-aiter, loaded by `mla_debug.real_aiter`) applied to a
weight after loading, a preshuffle-aware reader, an FP8 linear whose consumer reads its activation scale
in the other byte order, a W_UK derived from relaid bytes. Each rank is recorded by the real recorder,
`md.capture(...)` with transformers' name map (rank=/tp_size= given, as data/captures/make_samples.py
does), into a folder that `md.load_capture` reads back: the tests exercise capture -> store -> load ->
diff -> explain end to end.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from hf_deepseek import attention_widths, eager
from torch import nn

import mla_debug as md
from mla_debug.capture import Capture

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf  # noqa: E402

HEADS = 8
LINEARS = ("q_a_proj", "kv_a_proj_with_mqa", "q_b_proj", "kv_b_proj", "o_proj")
NORMS = ("q_a_layernorm", "kv_a_layernorm")
COLUMN, ROW = ("q_b_proj", "kv_b_proj"), ("o_proj",)
STEPS = {
    "q_a_proj": "fused_qkv_a",
    "kv_a_proj_with_mqa": "fused_qkv_a",
    "q_a_layernorm": "q_a_layernorm",
    "kv_a_layernorm": "kv_a_layernorm",
    "q_b_proj": "q_b_proj",
    "kv_b_proj": "kv_b_proj",
    "o_proj": "o_proj",
}


def hf_config(heads: int = HEADS):
    return eager(transformers.DeepseekV3Config(rope_interleave=True, **attention_widths(heads)))


@functools.lru_cache(maxsize=1)
def aiter_shuffle():
    from mla_debug import real_aiter
    from mla_debug.real_aiter import functions

    try:
        real_aiter.require_install()
    except ImportError as err:
        pytest.skip(f"amd-aiter is not usable here: {err}")
    return functions.shuffle_weight()


def loaded_weights(seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """The checkpoint: a seeded transformers attention's state dict (norm weights away from ones)."""
    torch.manual_seed(seed)
    attention = hf.DeepseekV3Attention(hf_config(), layer_idx=0)
    with torch.no_grad():
        attention.q_a_layernorm.weight.uniform_(0.5, 1.5)
        attention.kv_a_layernorm.weight.uniform_(0.5, 1.5)
    return {k: v.detach().to(dtype).clone() for k, v in attention.state_dict().items()}


def block_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An FP8 checkpoint's 128x128 block quant (e4m3fn, amax / 448), as DeepSeek's conversion writes it."""
    n, k = w.shape
    rows = -(-n // 128) * 128  # a last partial block of rows (kv_a_proj_with_mqa's 192) has its own scale
    padded = torch.nn.functional.pad(w.float(), (0, 0, 0, rows - n))
    blocks = padded.view(rows // 128, 128, k // 128, 128)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn).view(rows, k)[:n]
    return q.contiguous(), scale


def fp8_checkpoint(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in state.items():
        module = name.removesuffix(".weight")
        if module in LINEARS:
            out[name], out[f"{module}.weight_scale_inv"] = block_quantize(t)
        else:
            out[name] = t
    return out


class Fp8Linear(nn.Module):
    """A block-FP8 linear as an engine holds one: fp8 `weight`, fp32 `weight_scale_inv`; it quantizes its
    input per 1x128 with aiter's torch group quant (ROW_MAJOR scale) and its GEMM reads the scale bytes in
    `reads` order through a raw pointer (the planted defect hands a COL-reading consumer a ROW buffer)."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, reads: str = "row") -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.weight_scale_inv = nn.Parameter(scale, requires_grad=False)
        self.reads = reads
        self.last_input_scale: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from mla_debug.real_aiter import functions

        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        q, scale = functions.torch_group_quant("gfx950")(flat, quant_dtype=torch.float8_e4m3fn)
        self.last_input_scale = scale
        m, g = scale.shape
        memory = scale.contiguous().view(-1)
        read = memory.view(m, g) if self.reads == "row" else memory.view(g, m).t()
        x_deq = (q.float().view(m, g, 128) * read.unsqueeze(-1)).view(m, -1)
        n = self.weight.shape[0]
        per_element = self.weight_scale_inv.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
        w = self.weight.float() * per_element
        return (x_deq @ w.t()).to(x.dtype).view(*shape[:-1], -1)


class PreshuffledLinear(nn.Module):
    """A linear whose kernel expects its weight shuffled once by aiter's (16, 16) shuffle: it reads
    element (n, k) where aiter's shuffle put it (the permutation found by shuffling distinct bytes)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, k = self.weight.shape
        # Label every position with its index, 16 bits at a time in bf16 elements (so the shuffle sees
        # the weight's own element size), and read where aiter's shuffle moved each label.
        index = torch.arange(n * k, dtype=torch.int64)
        where = torch.zeros(n * k, dtype=torch.int64)
        for shift in (0, 16):
            labels = ((index >> shift) & 0xFFFF).to(torch.int32).to(torch.int16).view(torch.bfloat16).view(n, k)
            moved = aiter_shuffle()(labels).contiguous().view(torch.int16).reshape(-1).to(torch.int64) & 0xFFFF
            where |= moved << shift
        plain = torch.empty_like(self.weight.reshape(-1))
        plain[where] = self.weight.reshape(-1)
        return nn.functional.linear(x, plain.view(n, k).to(x.dtype))


def rank_module(state: dict[str, torch.Tensor], rank: int, tp: int) -> nn.Module:
    """One rank's attention: Nh/t heads, its shards of q_b_proj / kv_b_proj (rows) and o_proj (columns)."""
    dtype = state["q_a_proj.weight"].dtype
    attention = hf.DeepseekV3Attention(hf_config(HEADS // tp), layer_idx=0).to(dtype).eval()
    with torch.no_grad():
        for name, param in attention.state_dict().items():
            full = state[name]
            module = name.removesuffix(".weight")
            if module in COLUMN:
                full = full.chunk(tp, dim=0)[rank]
            elif module in ROW:
                full = full.chunk(tp, dim=1)[rank]
            param.copy_(full.to(param.dtype))
    return attention


def use_fp8(attention: nn.Module, ckpt: dict[str, torch.Tensor], rank: int, tp: int, reads: dict[str, str]) -> None:
    """Replace every linear with an Fp8Linear holding this rank's shard of the FP8 checkpoint."""
    for module in LINEARS:
        w, s = ckpt[f"{module}.weight"], ckpt[f"{module}.weight_scale_inv"]
        if module in COLUMN:
            w, s = w.chunk(tp, 0)[rank], s.chunk(tp, 0)[rank]
        elif module in ROW:
            w, s = w.chunk(tp, 1)[rank], s.chunk(tp, 1)[rank]
        setattr(attention, module, Fp8Linear(w.contiguous(), s.contiguous(), reads.get(module, "row")))


def inputs(tokens: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, 512, generator=gen).to(torch.bfloat16), torch.arange(3, 3 + tokens)


def run_rank(
    attention: nn.Module,
    hidden: torch.Tensor,
    positions: torch.Tensor,
    rank: int,
    tp: int,
    out: Path,
    note: str = "",
    tokens: list[int] | None = None,
) -> Path:
    """Forward one rank inside `md.capture` (transformers' name map, found from the attention's class) and
    return the rank folder it wrote under `out`.

    What the hooks cannot see is handed to the capture with `record`, as engine code would: the activation
    scale an FP8 linear computed inside its forward (`last_input_scale`) and a derived W_UK the module keeps.
    Each emulated rank returns its o_proj partial sum un-reduced (`row_output_reduced=False`). `tokens`
    keeps only those rows (all by default).
    """
    cfg = md.MLAConfig.from_hf(hf_config().to_dict(), name="hf-tiny")
    rotary = hf.DeepseekV3RotaryEmbedding(hf_config())
    x = hidden.unsqueeze(0)
    cos, sin = rotary(x.float(), positions.unsqueeze(0))
    t = hidden.shape[0]
    mask = torch.full((t, t), float("-inf")).triu(1).view(1, 1, t, t)
    with (
        md.capture(
            attention,
            out,
            layer=0,
            cfg=cfg,
            rank=rank,
            tp_size=tp,
            tokens=tokens,
            positions=(positions if tokens is None else positions[tokens]).tolist(),
            engine=md.capture.EngineInfo("transformers", transformers.__version__),
            mode="prefill",
            row_output_reduced=False,
            note=note,
        ) as cap,
        torch.no_grad(),
    ):
        attention(x, position_embeddings=(cos.to(x.dtype), sin.to(x.dtype)), attention_mask=mask.to(x.dtype))
        for name in LINEARS:
            scale = getattr(getattr(attention, name), "last_input_scale", None)
            if scale is not None:
                cap.record(f"{name}.input_scale", scale)
        w_uk = getattr(attention, "W_UK", None)
        if w_uk is not None:
            cap.record("W_UK", w_uk)
    assert cap.path is not None
    return cap.path


def capture_ranks(
    modules: list[nn.Module],
    hidden: torch.Tensor,
    positions: torch.Tensor,
    out: Path,
    note: str = "",
    tokens: list[int] | None = None,
) -> Capture:
    """Capture every rank's module into the new folder `out` and load it back with `md.load_capture`."""
    for rank, module in enumerate(modules):
        run_rank(module, hidden, positions, rank, len(modules), out, note, tokens)
    return md.load_capture(out)


def capture(
    state,
    tp: int,
    hidden,
    positions,
    out: Path,
    plant=None,
    fp8: dict[str, torch.Tensor] | None = None,
    reads=None,
    tokens: list[int] | None = None,
) -> Capture:
    """Capture the engine at `tp` into the new folder `out` and load it back; `plant(module, rank, tp)`
    edits each loaded rank module (the defect)."""
    modules = []
    for rank in range(tp):
        module = rank_module(state, rank, tp)
        if fp8 is not None:
            use_fp8(module, fp8, rank, tp, reads or {})
        if plant is not None:
            plant(module, rank, tp)
        modules.append(module)
    return capture_ranks(modules, hidden, positions, Path(out), tokens=tokens)
