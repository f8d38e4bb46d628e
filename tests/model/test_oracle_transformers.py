"""Oracle: transformers' DeepseekV3Attention and DeepseekV32Attention (fp32, eager) against run_layer,
at TP 1, 2 and 4, prefill and decode, at positions before and past yarn's original 4096.

fp32: weights imported unquantized from the module. The two differ only in fp32 summation order
(different op decomposition), so the relative L2 error must be far below 1e-5. transformers hard-wires
eps 1e-6 for the two latent norms; the config uses 1e-6 too, and it de-interleaves rotated pairs, which
leaves q.k unchanged (docs/semantics.md §9). DeepSeek-V3.2's attention runs its sparse indexer; with at most
index_topk tokens every query keeps every key it sees, so it equals dense MLA - and above that it does
not, which the dense run here says with a warning.

FP8: the module's weights in DeepSeek's published format (128x128 blocks, amax/448), run with the
reference kernels (1x128 activation quant, block-scaled GEMMs, bf16 activations). Against transformers
with the same weights dequantized and unquantized fp32 activations, the error may be what DeepSeek's own
activation quantization costs (its act_quant, amax/448 per 1x128 group, on every linear's input) and
little more: the two quantize the same inputs the same way, and the bf16 rounding of activations
between steps adds less than a quarter of that (bound: 1.25x DeepSeek's error).
"""

from __future__ import annotations

import pytest
import torch
from ckpt_helpers import deepseek_block_cast, deepseek_dequantize
from hf_deepseek import attention_widths, eager, transformers_output

import mla_debug as md
from mla_debug.model.indexer import SparseAttentionWarning

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf_v3  # noqa: E402
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf_v32  # noqa: E402

TOKENS = 12
INDEX_TOPK = TOKENS  # V3.2 runs below are exact up to here, inclusive
STARTS = (100, 5000)  # inside the yarn-blended region, and past original_max_position_embeddings


def _config(arch: str):
    if arch == "v3":
        return eager(transformers.DeepseekV3Config(rope_interleave=True, **attention_widths()))
    # V3.2's MLA always interleaves; its indexer has 4 heads of 128 here
    indexer = dict(index_n_heads=4, index_head_dim=128, index_topk=INDEX_TOPK)
    return eager(transformers.DeepseekV32Config(**indexer, **attention_widths()))


def _reference_module(version: str):
    config = _config(version)
    hf = hf_v3 if version == "v3" else hf_v32
    torch.manual_seed(0)
    attention = (hf.DeepseekV3Attention if version == "v3" else hf.DeepseekV32Attention)(config, 0).eval()
    with torch.no_grad():  # norm weights other than ones, so the norms are really tested
        attention.q_a_layernorm.weight.uniform_(0.5, 1.5)
        attention.kv_a_layernorm.weight.uniform_(0.5, 1.5)
    rotary = (hf.DeepseekV3RotaryEmbedding if version == "v3" else hf.DeepseekV32RotaryEmbedding)(config)
    cfg = md.MLAConfig.from_hf(config.to_dict(), name=f"hf-tiny-{version}")
    assert cfg.has_indexer == (version == "v3.2")
    return config, attention, rotary, cfg


@pytest.fixture(scope="module", params=["v3", "v3.2"])
def reference_module(request):
    return _reference_module(request.param)


@pytest.fixture(scope="module")
def v32_module():
    """The V3.2 attention alone: only it has an indexer."""
    return _reference_module("v3.2")


def _inputs(seed: int, tokens: int, start: int):
    hidden = torch.randn(tokens, 512, generator=torch.Generator().manual_seed(seed))
    return hidden, torch.arange(start, start + tokens)


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("tp_size", [1, 2, 4])
def test_fp32_layer_matches_transformers(reference_module, tp_size, mode, start):
    _, attention, rotary, cfg = reference_module
    ckpt = md.Checkpoint.from_state_dict(cfg, attention.state_dict(), quantize=False)
    assert len(ckpt.unmodelled) == (5 if cfg.has_indexer else 0)  # V3.2: the indexer's tensors, skipped
    hidden, positions = _inputs(1, TOKENS, start)
    expected = transformers_output(attention, rotary, hidden, positions)
    run = md.run_layer(cfg, ckpt, hidden, positions, tp_size=tp_size, mode=mode, dtype=torch.float32)
    assert run.output.dtype == torch.float32
    assert md.numerics.error_metrics(run.output, expected)["rel_l2"] < 1e-5


def test_positions_past_4096_reach_the_rope_step_and_agree_with_transformers(reference_module):
    """The same tokens at 100.. and at 5000..: the rope step rotates by the absolute positions, so its
    outputs differ; attention scores depend on position differences only, so the layer output is the
    same up to rounding - in transformers and here alike."""
    _, attention, rotary, cfg = reference_module
    ckpt = md.Checkpoint.from_state_dict(cfg, attention.state_dict(), quantize=False)
    runs = []
    for start in STARTS:
        hidden, positions = _inputs(2, TOKENS, start)
        runs.append(md.run_layer(cfg, ckpt, hidden, positions, dtype=torch.float32))
        expected = transformers_output(attention, rotary, hidden, positions)
        assert md.numerics.error_metrics(runs[-1].output, expected)["rel_l2"] < 1e-5
    rope = [run.records["rope"].output for run in runs]
    assert md.numerics.error_metrics(rope[1], rope[0])["rel_l2"] > 0.1
    assert md.numerics.error_metrics(runs[1].output, runs[0].output)["rel_l2"] < 1e-4


def test_decode_equals_prefill_in_fp32(reference_module):
    """Absorbed decode and naive prefill agree in exact arithmetic; in fp32 to summation order."""
    _, attention, _, cfg = reference_module
    ckpt = md.Checkpoint.from_state_dict(cfg, attention.state_dict(), quantize=False)
    hidden, positions = _inputs(2, 9, 0)
    prefill = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2, mode="prefill", dtype=torch.float32)
    decode = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2, mode="decode", dtype=torch.float32)
    assert md.numerics.error_metrics(decode.output, prefill.output)["rel_l2"] < 1e-5
    assert (
        md.numerics.error_metrics(decode.records["absorb_uv"].output, prefill.records["attention"].output)["rel_l2"]
        < 1e-5
    )


def test_v32_above_index_topk_differs_from_transformers_and_warns(v32_module):
    """Past index_topk tokens transformers' V3.2 attends to the keys its indexer picks; the dense run
    here attends to all of them. The first index_topk tokens (which see at most that many keys) still
    match; the later ones do not - and the run says so."""
    _, attention, rotary, cfg = v32_module
    ckpt = md.Checkpoint.from_state_dict(cfg, attention.state_dict(), quantize=False)
    hidden, positions = _inputs(3, INDEX_TOPK + 8, 5000)
    expected = transformers_output(attention, rotary, hidden, positions)
    with pytest.warns(SparseAttentionWarning, match=r"20 tokens exceed index_topk=12"):
        run = md.run_layer(cfg, ckpt, hidden, positions, dtype=torch.float32)
    exact, sparse = slice(0, INDEX_TOPK), slice(INDEX_TOPK, None)
    assert md.numerics.error_metrics(run.output[exact], expected[exact])["rel_l2"] < 1e-5
    assert md.numerics.error_metrics(run.output[sparse], expected[sparse])["rel_l2"] > 1e-3


# -- FP8 ---------------------------------------------------------------------------------------------


def _deepseek_act_quant(x: torch.Tensor) -> torch.Tensor:
    """DeepSeek's act_quant (inference/kernel.py), quantized and dequantized: per 1x128 group of the
    last dim, s = max(amax, 1e-4) / 448, q = e4m3fn(x / s), back to q * s."""
    groups = x.float().unflatten(-1, (-1, 128))
    scale = groups.abs().amax(dim=-1, keepdim=True).clamp(min=1e-4) / 448.0
    return ((groups / scale).to(torch.float8_e4m3fn).float() * scale).flatten(-2).to(x.dtype)


@pytest.fixture(scope="module")
def fp8_pair(reference_module):
    """(FP8 checkpoint in DeepSeek's format, transformers' module holding the same weights dequantized)."""
    config, attention, rotary, cfg = reference_module
    linears = [name for name, m in attention.named_modules() if isinstance(m, torch.nn.Linear)]
    mla = [name for name in linears if not name.startswith("indexer.")]
    state, dequantized = {}, {}
    for key, value in attention.state_dict().items():
        module = key.removesuffix(".weight")
        if module in mla:
            q, scale = deepseek_block_cast(value.to(torch.bfloat16))
            state[key], state[f"{module}.weight_scale_inv"] = q, scale
            dequantized[key] = deepseek_dequantize(q, scale)
        else:
            state[key] = value
            dequantized[key] = value
    twin = type(attention)(config, 0).eval()
    twin.load_state_dict(dequantized)
    ckpt = md.Checkpoint.from_state_dict(cfg, state)
    assert ckpt.quantized
    return ckpt, twin, rotary, cfg, mla


@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("tp_size", [1, 4])
def test_fp8_layer_is_within_deepseeks_activation_quant_noise(fp8_pair, tp_size, mode):
    ckpt, twin, rotary, cfg, mla = fp8_pair
    hidden, positions = _inputs(4, TOKENS, 5000)
    dense = transformers_output(twin, rotary, hidden, positions)
    hooks = [
        twin.get_submodule(name).register_forward_pre_hook(lambda _, args: (_deepseek_act_quant(args[0]),))
        for name in mla
    ]
    try:
        deepseek = transformers_output(twin, rotary, hidden, positions)
    finally:
        for hook in hooks:
            hook.remove()
    deepseek_noise = md.numerics.error_metrics(deepseek, dense)["rel_l2"]
    assert 1e-3 < deepseek_noise < 0.1  # FP8 activations cost something, and not everything
    run = md.run_layer(cfg, ckpt, hidden.to(torch.bfloat16), positions, tp_size=tp_size, mode=mode)
    ours = md.numerics.error_metrics(run.output.float(), dense)["rel_l2"]
    assert ours < 1.25 * deepseek_noise, (ours, deepseek_noise)
