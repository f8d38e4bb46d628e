"""MLA configurations: presets, derived sizes, TP checks and Hugging Face config.json import."""

from __future__ import annotations

import copy
import json
import math

import pytest
from released_configs import DEEPSEEK_V3_JSON, DEEPSEEK_V4_FLASH_JSON, DEEPSEEK_V32_EXP_JSON, KIMI_K2_INSTRUCT_JSON

from mla_debug.model import PRESETS, MLAConfig, RopeScaling

DIMENSIONS = (
    "arch",
    "hidden_size",
    "num_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "head_dim",
    "o_groups",
    "o_lora_rank",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
    "sliding_window",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "max_position_embeddings",
    "weight_block",
    "quantized",
)


def differing(a: MLAConfig, b: MLAConfig, skip: tuple[str, ...] = ()) -> dict:
    return {k: (getattr(a, k), getattr(b, k)) for k in DIMENSIONS if k not in skip and getattr(a, k) != getattr(b, k)}


# -- presets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_valid_and_is_named(name):
    cfg = MLAConfig.preset(name)
    assert cfg.name == name and cfg.problems() == []
    assert cfg.arch in ("v3", "v4")
    assert cfg.qk_head_dim == (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim if cfg.arch == "v3" else cfg.head_dim)
    assert cfg.weight_block == (128, 128)
    assert MLAConfig.preset(f"  {name.upper()} ") is cfg


def test_the_presets_exist():
    assert set(PRESETS) == {
        "mini",
        "deepseek-v3",
        "deepseek-r1",
        "deepseek-v3.1",
        "deepseek-v3.2",
        "kimi-k2",
        "kimi-k2-0905",
        "deepseek-v4-flash",
        "deepseek-v4.1",
        "deepseek-v4-pro",
        "tiny",
        "tiny-v4",
    }


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown preset 'deepseek-v2'; valid: deepseek-v3, .*tiny-v4"):
        MLAConfig.preset("deepseek-v2")


def test_deepseek_v3_dimensions_and_softmax_scale():
    cfg = MLAConfig.preset("deepseek-v3")
    assert (cfg.hidden_size, cfg.num_heads, cfg.q_lora_rank, cfg.kv_lora_rank) == (7168, 128, 1536, 512)
    assert (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.qk_head_dim) == (128, 64, 128, 192)
    mscale = 0.1 * 1.0 * math.log(40) + 1
    assert cfg.softmax_scale == 192**-0.5 * mscale**2
    assert round(cfg.softmax_scale, 6) == 0.135234
    # mscale == mscale_all_dim: the cos/sin multiplier cancels to exactly 1.
    assert cfg.rope_scaling.cos_sin_scale == 1.0
    assert MLAConfig.preset("deepseek-r1").with_(name="deepseek-v3") == cfg


def test_kimi_and_v4_softmax_scales():
    kimi = MLAConfig.preset("kimi-k2")
    assert kimi.num_heads == 64 and kimi.rope_theta == 50000.0
    assert kimi.softmax_scale == 192**-0.5 * (0.1 * math.log(32) + 1) ** 2
    flash = MLAConfig.preset("deepseek-v4-flash")
    assert flash.rope_scaling is None and flash.qk_head_dim == 512
    assert flash.softmax_scale == 512**-0.5


def test_rope_scaling_without_mscale_all_dim_leaves_the_softmax_unscaled():
    rs = RopeScaling(factor=40.0, mscale=1.0, mscale_all_dim=0.0)
    assert rs.softmax_mscale == 1.0
    assert rs.cos_sin_scale == 0.1 * math.log(40) + 1
    assert RopeScaling.yarn_mscale(1.0, 1.0) == 1.0


def test_the_cos_sin_multiplier_follows_transformers_mscale_rule():
    # transformers 5.24 _compute_yarn_parameters: the mscale ratio only when both are non-zero, else
    # mscale(factor, 1); an explicit attention_factor replaces both.
    g = RopeScaling.yarn_mscale
    assert RopeScaling(factor=40.0, mscale=0.5, mscale_all_dim=2.0).cos_sin_scale == g(40, 0.5) / g(40, 2.0)
    assert RopeScaling(factor=40.0, mscale=None, mscale_all_dim=2.0).cos_sin_scale == g(40)
    assert RopeScaling(factor=40.0, mscale=0.5, mscale_all_dim=0.0).cos_sin_scale == g(40)
    assert RopeScaling(factor=40.0, mscale=0.5, mscale_all_dim=2.0, attention_factor=0.75).cos_sin_scale == 0.75
    # The softmax mscale reads mscale_all_dim alone, attention_factor or not.
    assert RopeScaling(factor=40.0, mscale_all_dim=2.0, attention_factor=0.75).softmax_mscale == g(40, 2.0)


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"factor": 0.0}, "factor=0.0 must be a positive number"),
        ({"original_max_position_embeddings": 0}, "original_max_position_embeddings=0 must be positive"),
        ({"attention_factor": -1.0}, "attention_factor=-1.0 must be a positive number or None"),
    ],
)
def test_rope_scaling_refuses_values_no_reading_can_use(changes, pattern):
    with pytest.raises(ValueError, match=pattern):
        RopeScaling(**changes)


# -- tensor parallelism ----------------------------------------------------------------------------


def test_tiny_tp8_shards_that_fp8_blocks_cut_are_multiples_of_128():
    cfg, tp = MLAConfig.preset("tiny"), 8
    cfg.check_tp(tp)
    heads = cfg.num_heads // tp
    q_b_rows = heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
    kv_b_rows = heads * (cfg.qk_nope_head_dim + cfg.v_head_dim)
    o_proj_k = heads * cfg.v_head_dim
    assert (q_b_rows, kv_b_rows, o_proj_k) == (384, 512, 256)
    assert all(size % 128 == 0 for size in (q_b_rows, kv_b_rows, o_proj_k))


def test_tiny_v4_tp8_shards_that_fp8_blocks_cut_are_multiples_of_128():
    cfg, tp = MLAConfig.preset("tiny-v4"), 8
    cfg.check_tp(tp)
    wq_b_rows = cfg.num_heads // tp * cfg.head_dim
    wo_a_rows = cfg.o_groups // tp * cfg.o_lora_rank
    wo_b_k = cfg.o_groups * cfg.o_lora_rank // tp
    assert (wq_b_rows, wo_a_rows, wo_b_k) == (256, 128, 128)
    assert all(size % 128 == 0 for size in (wq_b_rows, wo_a_rows, wo_b_k))


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_every_preset_shards_at_tp_up_to_8(name, tp):
    MLAConfig.preset(name).check_tp(tp)


def test_check_tp_names_the_rule():
    tiny, v4 = MLAConfig.preset("tiny"), MLAConfig.preset("tiny-v4")
    with pytest.raises(ValueError, match=r"tiny: tp_size=0 must be >= 1"):
        tiny.check_tp(0)
    with pytest.raises(ValueError, match=r"tiny: tp_size=3 does not divide num_heads=16"):
        tiny.check_tp(3)
    # 16 heads shard 16 ways, the 8 output groups do not.
    with pytest.raises(ValueError, match=r"tiny-v4: tp_size=16 does not divide o_groups=8"):
        v4.check_tp(16)


def test_invalid_dimensions_are_reported_together():
    with pytest.raises(ValueError) as err:
        MLAConfig.preset("tiny").with_(qk_rope_head_dim=63, v_head_dim=0)
    assert "qk_rope_head_dim=63 must be even" in str(err.value)
    assert "v_head_dim=0 must be positive" in str(err.value)
    with pytest.raises(ValueError, match=r"num_heads=12 is not a multiple of o_groups=8"):
        MLAConfig.preset("tiny-v4").with_(num_heads=12)


# -- from_hf ---------------------------------------------------------------------------------------


def test_from_hf_real_deepseek_v3_config_equals_the_preset(tmp_path):
    path = tmp_path / "DeepSeek-V3"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(DEEPSEEK_V3_JSON))
    for source in (path, path / "config.json", DEEPSEEK_V3_JSON):
        cfg = MLAConfig.from_hf(source)
        preset = MLAConfig.preset("deepseek-v3")
        assert differing(cfg, preset) == {}
        assert cfg == preset.with_(name=cfg.name)
    assert MLAConfig.from_hf(path).name == "DeepSeek-V3"
    assert MLAConfig.from_hf(DEEPSEEK_V3_JSON, name="v3").name == "v3"


def test_from_hf_transformers_default_config_with_rope_parameters():
    transformers = pytest.importorskip("transformers")
    data = transformers.DeepseekV3Config().to_dict()
    assert "rope_parameters" in data and "rope_scaling" not in data
    cfg = MLAConfig.from_hf(data)
    v3 = MLAConfig.preset("deepseek-v3")
    # transformers' defaults: no yarn, 4096 positions, unquantized; every dimension as in DeepSeek-V3.
    assert cfg.rope_scaling is None and cfg.max_position_embeddings == 4096 and not cfg.quantized
    assert differing(cfg, v3, skip=("rope_scaling", "max_position_embeddings", "quantized")) == {}


def test_from_hf_transformers_config_with_yarn_in_rope_parameters():
    transformers = pytest.importorskip("transformers")
    yarn = dict(DEEPSEEK_V3_JSON["rope_scaling"])
    data = transformers.DeepseekV3Config(rope_scaling=yarn, max_position_embeddings=163840).to_dict()
    assert data["rope_parameters"]["rope_type"] == "yarn"
    cfg = MLAConfig.from_hf(data)
    assert differing(cfg, MLAConfig.preset("deepseek-v3"), skip=("quantized",)) == {}


def test_from_hf_kimi_k2_config_equals_the_preset():
    cfg = MLAConfig.from_hf(KIMI_K2_INSTRUCT_JSON)
    assert cfg.name == "kimi_k2"
    assert differing(cfg, MLAConfig.preset("kimi-k2")) == {}


def test_from_hf_deepseek_v32_config_equals_the_preset():
    cfg = MLAConfig.from_hf(DEEPSEEK_V32_EXP_JSON)
    preset = MLAConfig.preset("deepseek-v3.2")
    assert cfg.arch == "v3" and cfg.has_indexer and preset.has_indexer
    assert differing(cfg, preset) == {}
    # V3.2 is V3.1's MLA (V3's with ue8m0 scales) plus the indexer: every other dimension is DeepSeek-V3.1's.
    indexer = ("index_n_heads", "index_head_dim", "index_topk")
    assert differing(preset, MLAConfig.preset("deepseek-v3.1"), skip=indexer) == {}
    assert not MLAConfig.preset("deepseek-v3").has_indexer


def test_transformers_deepseek_v32_config_reads_its_indexer_fields():
    transformers = pytest.importorskip("transformers")
    data = transformers.DeepseekV32Config().to_dict()
    cfg = MLAConfig.from_hf(data)
    # transformers' defaults are the released model's, without yarn and unquantized.
    assert (cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk) == (64, 128, 2048)
    assert differing(cfg, MLAConfig.preset("deepseek-v3.2"), skip=("rope_scaling", "quantized", "scale_fmt")) == {}


def test_a_deepseek_v3_config_ignores_indexer_fields_and_v32_needs_all_three():
    # The model type decides: a deepseek_v3 config has no indexer whatever else it carries.
    v3 = MLAConfig.from_hf(_with(DEEPSEEK_V3_JSON, index_topk=2048, index_n_heads=64, index_head_dim=128))
    assert not v3.has_indexer and v3.index_topk == 0
    for field in ("index_n_heads", "index_head_dim", "index_topk"):
        with pytest.raises(ValueError, match=rf"required field '{field}' is missing"):
            MLAConfig.from_hf(_without(DEEPSEEK_V32_EXP_JSON, field))
    no_type = _without(DEEPSEEK_V32_EXP_JSON, "model_type")
    assert MLAConfig.from_hf(no_type).has_indexer  # the architecture names V3.2


def test_a_v3_indexer_is_all_or_nothing():
    v32 = MLAConfig.preset("deepseek-v3.2")
    with pytest.raises(ValueError, match=r"index_topk=0 must be positive for a v3 config with DeepSeek-V3.2's indexer"):
        v32.with_(index_topk=0)
    with pytest.raises(ValueError, match=r"index_head_dim=32 is below qk_rope_head_dim=64"):
        v32.with_(index_head_dim=32)
    assert v32.with_(index_n_heads=0, index_head_dim=0, index_topk=0) == MLAConfig.preset("deepseek-v3.1").with_(
        name="deepseek-v3.2"
    )


def test_from_hf_v4_config_equals_the_flash_preset():
    cfg = MLAConfig.from_hf(DEEPSEEK_V4_FLASH_JSON)
    assert cfg.arch == "v4"
    assert differing(cfg, MLAConfig.preset("deepseek-v4-flash")) == {}


def _without(data: dict, key: str) -> dict:
    out = copy.deepcopy(data)
    del out[key]
    return out


def _with(data: dict, **changes) -> dict:
    out = copy.deepcopy(data)
    out.update(changes)
    return out


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (_without(DEEPSEEK_V3_JSON, "hidden_size"), r"required field 'hidden_size' is missing"),
        (_without(DEEPSEEK_V3_JSON, "v_head_dim"), r"required field 'v_head_dim' is missing"),
        (_without(DEEPSEEK_V4_FLASH_JSON, "o_lora_rank"), r"required field 'o_lora_rank' is missing"),
        (
            _with(DEEPSEEK_V3_JSON, num_attention_heads="128"),
            r"field 'num_attention_heads' must be an integer, got '128'",
        ),
        (_with(DEEPSEEK_V3_JSON, kv_lora_rank=512.0), r"field 'kv_lora_rank' must be an integer"),
        (_with(DEEPSEEK_V3_JSON, hidden_size=True), r"field 'hidden_size' must be an integer, got True"),
        (_with(DEEPSEEK_V3_JSON, rms_norm_eps="1e-6"), r"field 'rms_norm_eps' must be a number"),
        (
            _with(DEEPSEEK_V3_JSON, rope_scaling={**DEEPSEEK_V3_JSON["rope_scaling"], "low_freq_factor": 1.0}),
            r"unknown RoPE fields \['low_freq_factor'\]",
        ),
        (
            _with(DEEPSEEK_V3_JSON, rope_parameters={"rope_type": "yarn", "factor": 32.0, "rope_theta": 10000.0}),
            r"rope_scaling and rope_parameters disagree on \['factor'\]",
        ),
        (
            _with(DEEPSEEK_V3_JSON, rope_scaling={**DEEPSEEK_V3_JSON["rope_scaling"], "type": "linear"}),
            r"RoPE type 'linear' is not supported",
        ),
        (
            _with(DEEPSEEK_V3_JSON, quantization_config={"quant_method": "awq", "bits": 4}),
            r"quantization_config.quant_method 'awq' is not modelled \(known: 'fp8'",
        ),
        (
            _with(
                DEEPSEEK_V3_JSON,
                quantization_config={**DEEPSEEK_V3_JSON["quantization_config"], "activation_scheme": "static"},
            ),
            r"activation_scheme 'static' is not 'dynamic'",
        ),
        (
            _with(
                DEEPSEEK_V3_JSON,
                quantization_config={**DEEPSEEK_V3_JSON["quantization_config"], "weight_block_size": [128]},
            ),
            r"quantization_config.weight_block_size must be two positive ints",
        ),
        (_with(DEEPSEEK_V3_JSON, q_lora_rank=None), r"q_lora_rank is null"),
        (
            {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8},
            r"\(llama\): neither an MLA config \(kv_lora_rank\) nor a DeepSeek-V4 config \(o_groups\)",
        ),
        (_with(DEEPSEEK_V3_JSON, qk_rope_head_dim=63), r"qk_rope_head_dim=63 must be even"),
    ],
    ids=[
        "missing-hidden_size",
        "missing-v_head_dim",
        "missing-v4-o_lora_rank",
        "string-heads",
        "float-rank",
        "bool-hidden",
        "string-eps",
        "unknown-rope-key",
        "rope-clash",
        "rope-linear",
        "awq",
        "static-act",
        "bad-block",
        "q_lora-null",
        "llama",
        "odd-rope",
    ],
)
def test_from_hf_errors_name_the_field(data, pattern):
    with pytest.raises(ValueError, match=pattern):
        MLAConfig.from_hf(data)


def test_rope_scaling_and_rope_parameters_that_agree_are_accepted():
    both = _with(
        DEEPSEEK_V3_JSON,
        rope_parameters={**DEEPSEEK_V3_JSON["rope_scaling"], "rope_type": "yarn", "rope_theta": 10000.0},
    )
    assert differing(MLAConfig.from_hf(both), MLAConfig.preset("deepseek-v3")) == {}


def test_from_hf_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        MLAConfig.from_hf(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        MLAConfig.from_hf(tmp_path)


def test_transformers_deepseek_v4_config_parses_to_the_flash_preset():
    """transformers splits V4's rope_parameters into main/compress; the main attention uses "main"."""
    transformers = pytest.importorskip("transformers")
    cfg = MLAConfig.from_hf(transformers.DeepseekV4Config().to_dict(), name="deepseek-v4-flash")
    assert cfg.with_(quantized=True) == MLAConfig.preset("deepseek-v4-flash")


def test_mini_has_deepseek_v3_heads_at_a_small_hidden_size():
    mini, v3 = MLAConfig.preset("mini"), MLAConfig.preset("deepseek-v3")
    same = ("num_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_scaling")
    assert all(getattr(mini, f) == getattr(v3, f) for f in same)
    assert (mini.hidden_size, mini.q_lora_rank) == (1024, 512)
