"""YaRN RoPE scaling as a config holds it (`MLAConfig.rope_scaling`), with the derived values a rotary
embedding needs."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RopeScaling:
    """YaRN RoPE scaling (``rope_scaling`` / ``rope_parameters`` in config.json), with transformers 5.24's
    semantics (``modeling_rope_utils._compute_yarn_parameters`` and DeepSeek-V3's ``yarn_apply_mscale``):

    - ``factor``: the interpolation factor (`hf_config` turns a ``null`` one into max_position_embeddings /
      original_max_position_embeddings, as transformers does).
    - ``beta_fast`` / ``beta_slow``: the correction range in rotations; 0 means the default (32 / 1), as
      transformers' ``beta_fast or 32`` does.
    - ``mscale`` / ``mscale_all_dim``: the cos/sin multiplier is mscale(factor, mscale) /
      mscale(factor, mscale_all_dim) only when BOTH are non-zero, else mscale(factor, 1); ``mscale`` None
      is the key absent from config.json (which transformers treats like 0). The softmax scale gains
      mscale(factor, mscale_all_dim)^2 when ``mscale_all_dim`` is non-zero.
    - ``original_max_position_embeddings``: the pre-training context the correction range is measured in.
    - ``truncate``: floor/ceil the correction range to whole dimensions (transformers' default, and what
      vLLM 0.33 / SGLang 0.5.23 always do); False keeps the fractional bounds.
    - ``attention_factor``: an explicit cos/sin multiplier replacing the mscale ratio (None: derived).

    The engines read fewer of these: vLLM 0.33's ``DeepseekScalingRotaryEmbedding`` always truncates,
    defaults an absent mscale to 1 and ignores ``attention_factor`` (except that 1.0 switches its softmax
    mscale off, ``deepseek_llama_scaling``). Released DeepSeek and Kimi configs set factor, both betas, both
    mscales and original_max_position_embeddings, where every reading agrees.
    """

    factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float = 0.0
    original_max_position_embeddings: int = 4096
    truncate: bool = True
    attention_factor: float | None = None

    def __post_init__(self) -> None:
        if self.factor <= 0 or not math.isfinite(self.factor):
            raise ValueError(f"RopeScaling: factor={self.factor} must be a positive number")
        if self.original_max_position_embeddings <= 0:
            raise ValueError(
                f"RopeScaling: original_max_position_embeddings={self.original_max_position_embeddings} must be positive"
            )
        if self.attention_factor is not None and not (
            self.attention_factor > 0 and math.isfinite(self.attention_factor)
        ):
            raise ValueError(f"RopeScaling: attention_factor={self.attention_factor} must be a positive number or None")

    @staticmethod
    def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
        """0.1 * mscale * ln(factor) + 1 for factor > 1, else 1."""
        return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0

    @property
    def cos_sin_scale(self) -> float:
        """The multiplier applied to cos/sin (transformers' ``attention_scaling``): ``attention_factor``
        when given, else mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both mscales are
        non-zero, else mscale(factor, 1)."""
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return self.yarn_mscale(self.factor, self.mscale) / self.yarn_mscale(self.factor, self.mscale_all_dim)
        return self.yarn_mscale(self.factor)

    @property
    def softmax_mscale(self) -> float:
        """The mscale whose square multiplies the softmax scale (1 when mscale_all_dim is 0)."""
        return self.yarn_mscale(self.factor, self.mscale_all_dim) if self.mscale_all_dim else 1.0

    @property
    def correction_betas(self) -> tuple[float, float]:
        """(beta_fast, beta_slow) as used: 0 stands for the defaults 32 and 1 (transformers' ``or``)."""
        return (self.beta_fast or 32.0, self.beta_slow or 1.0)
