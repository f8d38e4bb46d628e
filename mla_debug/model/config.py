"""MLA layer configurations: presets for the models we debug; Hugging Face config.json both ways (`hf_config`).

Two attention families share one dataclass:
- ``arch="v3"`` - DeepSeek-V3/R1/V3.1 and Kimi-K2 MLA (docs/semantics.md §9): q/kv LoRA, nope + rope heads,
  kv_b_proj; with ``index_*`` set, DeepSeek-V3.2's layer, whose sparse top-k indexer is recognised but not modelled.
- ``arch="v4"`` - DeepSeek-V4 attention (docs/semantics.md §10): one shared KV head of ``head_dim``, grouped output
  projection (wo_a as a BMM over ``o_groups``, then wo_b) and an indexer query projection.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .hf_config import from_hf_fields, to_hf_dict
from .rope_scaling import RopeScaling


@dataclass(frozen=True)
class MLAConfig:
    """Dimensions of one attention layer (names as in docs/semantics.md §1: H, Nh, Lq, Lkv, P, R, V)."""

    name: str
    arch: str
    hidden_size: int
    num_heads: int
    q_lora_rank: int
    qk_rope_head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    # True: RoPE rotates interleaved pairs (x[2i], x[2i+1]), DeepSeek's convention (GPT-J style); False: it
    # rotates the halves (x[i], x[i+R/2]), what transformers does for `rope_interleave: false` (v3 only; `rope`).
    rope_interleave: bool = True
    max_position_embeddings: int = 163840
    # DeepSeek-V3 family
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek-V4 family (index_*: also DeepSeek-V3.2, a v3 layer with a sparse top-k indexer beside it)
    head_dim: int = 0
    o_groups: int = 0
    o_lora_rank: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    sliding_window: int = 0
    # Checkpoint quantization
    weight_block: tuple[int, int] = (128, 128)
    quantized: bool = True
    # None: block scales are whatever amax/fp8-max gives; "ue8m0": powers of two (DeepSeek-V3.1's
    # quantization_config.scale_fmt), for the checkpoint's weight scales and the activations' at serving time.
    scale_fmt: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"MLAConfig {self.name!r}: " + "; ".join(problems))

    # -- derived sizes ----------------------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: P + R (v3) or head_dim (v4)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.arch == "v3" else self.head_dim

    @property
    def has_indexer(self) -> bool:
        """A sparse top-k indexer picks the keys each query attends to (DeepSeek-V3.2 and V4)."""
        return self.index_topk > 0 and self.index_n_heads > 0

    @property
    def softmax_scale(self) -> float:
        """qk_head_dim^-0.5, times mscale^2 under deepseek-yarn."""
        scale = self.qk_head_dim**-0.5
        if self.rope_scaling is not None:
            scale *= self.rope_scaling.softmax_mscale**2
        return scale

    def problems(self) -> list[str]:
        """Every inconsistency, in words (empty when the config is valid)."""
        out = []
        if self.arch not in ("v3", "v4"):
            out.append(f"arch {self.arch!r} is not 'v3' or 'v4'")
        for name in ("hidden_size", "num_heads", "q_lora_rank", "qk_rope_head_dim"):
            if getattr(self, name) <= 0:
                out.append(f"{name}={getattr(self, name)} must be positive")
        if self.qk_rope_head_dim % 2:
            out.append(f"qk_rope_head_dim={self.qk_rope_head_dim} must be even (RoPE rotates pairs)")
        if self.arch == "v3":
            for name in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
                if getattr(self, name) <= 0:
                    out.append(f"{name}={getattr(self, name)} must be positive for a v3 (MLA) config")
            out += self._v32_indexer_problems()
        if self.arch == "v4":
            for name in ("head_dim", "o_groups", "o_lora_rank", "index_n_heads", "index_head_dim"):
                if getattr(self, name) <= 0:
                    out.append(f"{name}={getattr(self, name)} must be positive for a v4 config")
            if self.head_dim and self.qk_rope_head_dim > self.head_dim:
                out.append(f"qk_rope_head_dim={self.qk_rope_head_dim} exceeds head_dim={self.head_dim}")
            if self.o_groups and self.num_heads % self.o_groups:
                out.append(f"num_heads={self.num_heads} is not a multiple of o_groups={self.o_groups}")
        if not isinstance(self.rope_interleave, bool):
            out.append(f"rope_interleave={self.rope_interleave!r} must be True or False")
        elif self.arch == "v4" and not self.rope_interleave:
            out.append(
                "rope_interleave=False is modelled for v3 (MLA) configs only; DeepSeek-V4 rotates interleaved pairs"
            )
        elif self.has_indexer and not self.rope_interleave:
            out.append(
                "rope_interleave=False is not modelled with DeepSeek-V3.2's indexer: transformers' deepseek_v32 "
                "always rotates interleaved pairs, SGLang honours the key - the pairing would be ambiguous"
            )
        if self.scale_fmt not in (None, "ue8m0"):
            out.append(f"scale_fmt={self.scale_fmt!r} is not None or 'ue8m0'")
        if self.rms_norm_eps <= 0:
            out.append(f"rms_norm_eps={self.rms_norm_eps} must be positive")
        return out

    def _v32_indexer_problems(self) -> list[str]:
        # A v3 layer has DeepSeek-V3.2's indexer beside it or none: all three index_* fields positive, or
        # all zero. The indexer rotates the first qk_rope_head_dim dims of its own heads.
        indexer = {name: getattr(self, name) for name in ("index_n_heads", "index_head_dim", "index_topk")}
        if not any(indexer.values()):
            return []
        out = [
            f"{name}={value} must be positive for a v3 config with DeepSeek-V3.2's indexer (or all three 0: none)"
            for name, value in indexer.items()
            if value <= 0
        ]
        if 0 < self.index_head_dim < self.qk_rope_head_dim:
            out.append(f"index_head_dim={self.index_head_dim} is below qk_rope_head_dim={self.qk_rope_head_dim}")
        return out

    def check_tp(self, tp_size: int) -> None:
        """Raise when `tp_size` cannot shard this layer (heads, and output groups for v4)."""
        if tp_size < 1:
            raise ValueError(f"{self.name}: tp_size={tp_size} must be >= 1")
        if self.num_heads % tp_size:
            raise ValueError(f"{self.name}: tp_size={tp_size} does not divide num_heads={self.num_heads}")
        if self.arch == "v4" and self.o_groups % tp_size:
            raise ValueError(f"{self.name}: tp_size={tp_size} does not divide o_groups={self.o_groups}")

    def with_(self, **changes: Any) -> MLAConfig:
        return replace(self, **changes)

    # -- constructors -----------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> MLAConfig:
        """A named configuration: deepseek-v3, deepseek-r1, deepseek-v3.1, deepseek-v3.2, kimi-k2,
        kimi-k2-0905, deepseek-v4-flash, deepseek-v4.1, deepseek-v4-pro, mini, tiny, tiny-v4."""
        key = name.strip().lower()
        if key not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
        return PRESETS[key]

    @classmethod
    def from_hf(cls, source: str | Path | dict, name: str | None = None) -> MLAConfig:
        """Read a Hugging Face config.json (a path to the file or its folder, or the parsed dict); the
        key mapping is `hf_config.from_hf_fields`'s."""
        if isinstance(source, dict):
            return cls(name=name or str(source.get("model_type", "hf")), **from_hf_fields(source, _defaults(cls)))
        path = Path(source)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"MLAConfig.from_hf: {path} does not exist")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"MLAConfig.from_hf: {path} is not valid JSON ({err})") from None
        return cls(name=name or path.parent.name, **from_hf_fields(data, _defaults(cls)))

    def to_hf(self, quantized: bool | None = None) -> dict[str, Any]:
        """The Hugging Face config.json fields of this config (what `Checkpoint.save` writes), which
        `from_hf` reads back to an equal config; `quantized` overrides whether quantization_config is
        written (default `self.quantized`).

        >>> MLAConfig.from_hf(md.MLAConfig.preset("tiny").to_hf(), name="tiny") == md.MLAConfig.preset("tiny")
        True
        """
        return to_hf_dict(self, quantized)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["rope_scaling"] = None if self.rope_scaling is None else vars(self.rope_scaling).copy()
        out["weight_block"] = list(self.weight_block)
        return out


def _defaults(cls: type) -> dict[str, Any]:
    """The default of every field of a config class that has one (what an absent config.json key means)."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


_DEEPSEEK_YARN = RopeScaling(
    factor=40.0, beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0, original_max_position_embeddings=4096
)
# Kimi-K2-Instruct / -Base (131072 positions) and Kimi-K2-Instruct-0905 / -Thinking (262144): yarn factor 32 and
# 64 on the same 4096-position pre-training, betas 1 and 1. Sources and what could be checked against the
# releases: tests/model/released_configs.py.
_KIMI_YARN = RopeScaling(
    factor=32.0, beta_fast=1.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0, original_max_position_embeddings=4096
)
_KIMI_YARN_256K = replace(_KIMI_YARN, factor=64.0)

_V3 = dict(
    arch="v3",
    hidden_size=7168,
    num_heads=128,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    rope_scaling=_DEEPSEEK_YARN,
    max_position_embeddings=163840,
)
_KIMI_K2 = dict(
    _V3,
    num_heads=64,
    rope_theta=50000.0,
    rms_norm_eps=1e-6,
    rope_scaling=_KIMI_YARN,
    max_position_embeddings=131072,
)
_V4_FLASH = dict(
    arch="v4",
    hidden_size=4096,
    num_heads=64,
    head_dim=512,
    qk_rope_head_dim=64,
    q_lora_rank=1024,
    o_groups=8,
    o_lora_rank=1024,
    index_n_heads=64,
    index_head_dim=128,
    index_topk=512,
    sliding_window=128,
    max_position_embeddings=1048576,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
)

PRESETS: dict[str, MLAConfig] = {
    "deepseek-v3": MLAConfig(name="deepseek-v3", **_V3),
    "deepseek-r1": MLAConfig(name="deepseek-r1", **_V3),
    # DeepSeek-V3.1 (and its -Terminus update): V3's attention; its weights and serving-time activations
    # use power-of-two block scales (quantization_config.scale_fmt "ue8m0").
    "deepseek-v3.1": MLAConfig(name="deepseek-v3.1", **_V3, scale_fmt="ue8m0"),
    # DeepSeek-V3.2(-Exp): DeepSeek-V3's MLA with the lightning indexer beside it (64 heads of 128, top 2048
    # keys per query), as in its config.json and transformers' DeepseekV32Config defaults, and V3.1's
    # power-of-two block scales. The indexer is recognised, not modelled (`model.indexer`): runs are exact
    # while no query sees more than 2048 keys.
    "deepseek-v3.2": MLAConfig(
        name="deepseek-v3.2",
        **{**_V3, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048, "scale_fmt": "ue8m0"},
    ),
    "kimi-k2": MLAConfig(name="kimi-k2", **_KIMI_K2),
    # Kimi-K2-Instruct-0905 (Kimi-K2-Thinking has the same attention, left in bf16 by its INT4 release).
    "kimi-k2-0905": MLAConfig(
        name="kimi-k2-0905", **{**_KIMI_K2, "rope_scaling": _KIMI_YARN_256K, "max_position_embeddings": 262144}
    ),
    "deepseek-v4-flash": MLAConfig(name="deepseek-v4-flash", **_V4_FLASH),
    # DeepSeek-V4.1-Flash: the widths vLLM 0.33.0's V4.1 attention mega kernel is built for
    # (models/deepseek_v41/amd/mono/attention/plan.py: HIDDEN 5120, Q_RANK 1280, HEAD_DIM 512, ROPE 64,
    # N_HEADS 64, O_GROUPS 8, O_RANK 1024, WINDOW 128, TOPK 512, and its q/kv norm EPS 1e-20; the
    # keylist.py docstring names the model), with the indexer's 32 heads of 128
    # (models/deepseek_v41/attention.py, DeepseekV4Indexer.__init__: "index_n_heads  # 32",
    # "index_head_dim  # 128"). Not in the wheel, so V4-Flash's: rope_theta, max_position_embeddings.
    "deepseek-v4.1": MLAConfig(
        name="deepseek-v4.1",
        **{
            **_V4_FLASH,
            "hidden_size": 5120,
            "q_lora_rank": 1280,
            "index_n_heads": 32,
            "rms_norm_eps": 1e-20,
        },
    ),
    # Pro dimensions are unverified (docs/semantics.md §10): H 7168, 128 heads, Lq 1536, 16 output groups.
    "deepseek-v4-pro": MLAConfig(
        name="deepseek-v4-pro",
        **{**_V4_FLASH, "hidden_size": 7168, "num_heads": 128, "q_lora_rank": 1536, "o_groups": 16},
    ),
    # Small enough for CI and notebooks; head widths as in DeepSeek so that every TP-8 shard that FP8
    # blocks cut is still a multiple of 128 (q_b 2x192=384, kv_b 2x256=512, o_proj K 2x128=256).
    "tiny": MLAConfig(
        name="tiny", **{**_V3, "hidden_size": 512, "num_heads": 16, "q_lora_rank": 256, "kv_lora_rank": 128}
    ),
    # DeepSeek-V3's head structure (128 heads, Lkv 512) at a small hidden size: its per-rank kv_b_proj and
    # o_proj shapes hit aiter's gfx950 tuned table exactly where DeepSeek-V3's do (TP4, TP8), so the
    # TP-dependent bugs reproduce in seconds.
    "mini": MLAConfig(name="mini", **{**_V3, "hidden_size": 1024, "q_lora_rank": 512}),
    "tiny-v4": MLAConfig(
        name="tiny-v4",
        **{
            **_V4_FLASH,
            "hidden_size": 512,
            "num_heads": 16,
            "head_dim": 128,
            "q_lora_rank": 256,
            "o_groups": 8,
            "o_lora_rank": 128,
            "index_n_heads": 4,
            "index_head_dim": 128,
            "index_topk": 16,
            "sliding_window": 8,
        },
    ),
}
