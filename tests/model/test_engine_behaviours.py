"""The model-side behaviours of today's engines, run as layer mechanics: vLLM 0.33's bf16 and SGLang's
per-tensor FP8 W_UK / W_UV, the load order (SGLang's remote-KV loader), vLLM 0.33's fused V3 norm+quant
producer, and DeepSeek-V4.1's reset of wo_a's is_bmm."""

from __future__ import annotations

import pytest
import torch

import mla_debug as md
from mla_debug.layouts import ScaleLayout, ViolationKind
from mla_debug.model.load_order import ABSORBED_READER
from mla_debug.normquant import fused_qk_rmsnorm_group_quant


def tokens(cfg, n=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, cfg.hidden_size, generator=gen), torch.arange(n)


def varied_tokens(cfg, n=8, seed=0):
    """Tokens whose magnitudes differ (by up to 2^6), as real activations do: a row that reads another
    row's scale is then visibly wrong."""
    hidden, positions = tokens(cfg, n, seed)
    return hidden * torch.exp2(torch.arange(n) % 4 * 2.0)[:, None], positions


def rel(a, b):
    return md.numerics.error_metrics(a, b)["rel_l2"]


def scenario(base: str, name: str, **behaviour):
    return md.scenario({"base": base, "name": name, "behaviour": behaviour})


@pytest.fixture(scope="module")
def kv512():
    """tiny with kv_lora_rank 512: kv_b_proj is (4096, 512) at TP1 and (2048, 512) at TP2, shapes in aiter's
    gfx950 bpreshuffle table, so vllm-pr51692's preshuffled kernel takes (and shuffles) it."""
    cfg = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
    return cfg, md.Checkpoint.synthetic(cfg, seed=3)


@pytest.fixture(scope="module")
def tiny_v4():
    cfg = md.MLAConfig.preset("tiny-v4")
    return cfg, md.Checkpoint.synthetic(cfg, seed=0)


# -- absorbed weights in the layer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "bmm", "bound"),
    [
        ("bf16", "dequantized", 0.01),
        ("fp8-per-tensor", "dequantized", 0.05),
        ("fp8-per-tensor", "fp8-group-quant", 0.08),
    ],
)
def test_absorbed_weight_rules_cost_a_rounding_not_a_misread(kv512, dtype, bmm, bound):
    """Each engine's W_UK / W_UV keeps decode close to the fp32 rule and breaks no contract; the events
    say which rule ran. Measured rel L2 at absorb_uk / absorb_uv: 2.8e-3 / 3.4e-3 (bf16), 2.4e-2 / 3.6e-2
    (per-tensor FP8 as bf16), 3.7e-2 / 4.8e-2 (per-tensor FP8 through the FP8 BMM)."""
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg)
    exact = md.run_layer(cfg, ckpt, hidden, positions, mode="decode", platform="mi355x", scenario="vllm-baseline")
    scen = scenario("vllm-baseline", f"absorbed-{dtype}-{bmm}", absorbed_weight_dtype=dtype, absorbed_bmm=bmm)
    run = md.run_layer(cfg, ckpt, hidden, positions, mode="decode", platform="mi355x", scenario=scen)
    for step in ("absorb_uk", "absorb_uv"):
        assert 0 < rel(run.records[step].output, exact.records[step].output) < bound, step
    assert run.violations == []
    assert any("W_UK/W_UV" in event for event in run.events["kv_b_proj"])
    prefill = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario=scen)
    baseline_prefill = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario="vllm-baseline")
    assert torch.equal(prefill.output, baseline_prefill.output)  # prefill runs kv_b_proj through its kernel


@pytest.mark.parametrize(("dtype", "bmm"), [("bf16", "dequantized"), ("fp8-per-tensor", "fp8-group-quant")])
def test_a_relaid_kv_b_proj_still_shows_under_every_rule(kv512, dtype, bmm):
    """Re-quantizing or rounding the weights happens after the direct read: shuffled bytes are still
    recorded as such, and still break decode."""
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg)
    truth = md.run_layer(cfg, ckpt, hidden, positions, mode="decode")
    scen = scenario("vllm-pr51692", f"pr51692-{dtype}", absorbed_weight_dtype=dtype, absorbed_bmm=bmm)
    run = md.run_layer(cfg, ckpt, hidden, positions, mode="decode", platform="mi355x", scenario=scen)
    for step in ("absorb_uk", "absorb_uv"):
        (violation,) = run.records[step].violations
        assert violation.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ and violation.effective
    assert rel(run.output, truth.output) > 0.5


def test_the_per_tensor_scale_is_each_ranks_own(kv512):
    """post_load_weights runs on every rank's shard: at TP2 each rank re-quantizes its half with its own
    amax, so gathered W_UK differs from TP1's - the rule depends on the TP size."""
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg)
    scen = scenario("vllm-baseline", "per-tensor", absorbed_weight_dtype="fp8-per-tensor")
    runs = {
        tp: md.run_layer(cfg, ckpt, hidden, positions, tp_size=tp, mode="decode", platform="mi355x", scenario=scen)
        for tp in (1, 2)
    }
    exact = md.run_layer(cfg, ckpt, hidden, positions, mode="decode", platform="mi355x", scenario="vllm-baseline")
    assert not torch.equal(runs[1].records["absorb_uk"].output, runs[2].records["absorb_uk"].output)
    for run in runs.values():
        assert rel(run.records["absorb_uk"].output, exact.records["absorb_uk"].output) < 0.05


# -- load order ---------------------------------------------------------------------------------------------


def test_remote_kv_order_derives_w_uk_from_the_shuffled_bytes(kv512):
    """A kernel that shuffles kv_b_proj at load (vllm-pr51692's preshuffled GEMM, flags ignored, like
    SGLang's on gfx95): derived before the kernel's load (SGLang's standard loader) W_UK / W_UV come
    from the plain bytes and decode is clean; the remote-KV loader derives them after, from the shuffled
    bytes - decode diverges, and the violation says who shuffled and that the derivation came after."""
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg)
    standard = scenario("vllm-pr51692", "sglang-like", absorbed_weights_derived="before-kernel-load")
    remote = scenario(
        "vllm-pr51692", "sglang-like-remote", absorbed_weights_derived="before-kernel-load", load_order="remote-kv"
    )
    truth = md.run_layer(cfg, ckpt, hidden, positions, mode="decode")
    runs = {
        s.name: md.run_layer(cfg, ckpt, hidden, positions, mode="decode", platform="mi355x", scenario=s)
        for s in (standard, remote)
    }
    for run in runs.values():
        assert run.kernels["kv_b_proj"].kernel == "aiter-bpreshuffle"
    clean, broken = runs["sglang-like"], runs["sglang-like-remote"]
    assert clean.records["absorb_uk"].violations == []
    assert clean.records["absorb_uk"].weight_layout.plain
    assert rel(clean.output, truth.output) < 0.05
    (violation,) = broken.records["absorb_uk"].violations
    assert violation.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ and violation.effective
    assert "after the remote-KV loader ran the kernels' process_weights_after_loading" in violation.consumer
    assert violation.found.shufflers == ("aiter-bpreshuffle.process_weights_after_loading",)
    assert broken.records["absorb_uk"].weight_layout.shuffle_count == 1
    assert rel(broken.output, truth.output) > 0.5
    assert any(event.startswith("remote-KV load") for event in broken.events["kv_b_proj"])
    assert any("after the kernel's process_weights_after_loading" in e for e in broken.events["kv_b_proj"])
    assert any(event.startswith("remote-KV load") for event in broken.events["q_b_proj"])
    # Prefill multiplies kv_b_proj through the kernel that shuffled it: the load order cannot matter there.
    prefill = {
        s.name: md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario=s) for s in (standard, remote)
    }
    assert torch.equal(prefill["sglang-like"].output, prefill["sglang-like-remote"].output)


def test_the_default_order_reads_after_the_kernel_as_before(kv512):
    """vLLM's order (the default) is the one every earlier verdict used: same reader, same violation."""
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg)
    run = md.run_layer(cfg, ckpt, hidden, positions, mode="decode", platform="mi355x", scenario="vllm-pr51692")
    (violation,) = run.records["absorb_uk"].violations
    assert violation.consumer == ABSORBED_READER
    assert not any("W_UK/W_UV" in event or "remote-KV" in event for e in run.events.values() for event in e)


def test_reading_before_the_kernels_load_sees_the_checkpoints_bytes(kv512):
    cfg, ckpt = kv512
    layer = md.MLALayer(cfg, ckpt, 1, "mi355x", "vllm-pr51692")
    linear = layer.ranks[0].linears["kv_b_proj"]
    assert linear.weight_layout.shuffle_count == 1 and linear.direct_read_layout(True).plain
    before, violation = linear.read_direct("reader", before_kernel_load=True)
    assert violation is None
    assert torch.equal(before, ckpt.dense_weight("kv_b_proj").to(torch.float32))
    after, violation = linear.read_direct("reader")
    assert violation is not None and not torch.equal(after, before)


# -- the V3 fused norm+quant producer (vLLM 0.33's MLADualRMSGroupQuantPattern) ----------------------------


def fused_v3(transpose: bool = False):
    return scenario(
        "vllm-baseline",
        f"v3-fused-{transpose}",
        v3_fused_norm_quant=True,
        v3_fused_transpose_scale=transpose,
        norm_quant_backend="torch",
    )


def test_v3_fused_producer_is_its_own_decomposition_byte_for_byte(kv512):
    """With a consumer that reads the producer's order (aiter-blockscale: ROW_MAJOR), q_b_proj's output is
    bitwise the unfused composition of the same parts: the norm+quant op on q_c (and kv_c), its
    QuantizedActivation handed to q_b_proj's kernel. The recorded norms are the op's outputs."""
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg)
    layer = md.MLALayer(cfg, ckpt, 2, "mi355x", fused_v3())
    run = layer.run(hidden, positions)
    assert run.records["q_a_layernorm"].kernel == "fused_qk_rmsnorm_group_quant (torch)"
    assert run.records["kv_a_layernorm"].kernel == "fused_qk_rmsnorm_group_quant"
    assert run.violations == []
    qkv_a = layer.last_per_rank["fused_qkv_a"][0].output
    lq, lkv = cfg.q_lora_rank, cfg.kv_lora_rank
    norms = {name: ckpt.norm_weight(name) for name in ("q_a_layernorm", "kv_a_layernorm")}
    for rank in range(2):
        linear = layer.ranks[rank].linears["q_b_proj"]
        result = fused_qk_rmsnorm_group_quant(
            qkv_a[:, :lq],
            norms["q_a_layernorm"],
            cfg.rms_norm_eps,
            qkv_a[:, lq : lq + lkv],
            norms["kv_a_layernorm"],
            cfg.rms_norm_eps,
            fmt=linear.block.weight.fmt,
            return_unquantized=True,
            backend="torch",
        )
        assert result.q_quant.scale_layout is md.ScaleLayout.ROW_MAJOR
        by_hand = linear.block.kernel.run(linear.block, result.q_quant).output
        assert torch.equal(layer.last_per_rank["q_b_proj"][rank].output, by_hand)
        assert torch.equal(layer.last_per_rank["q_a_layernorm"][rank].output, result.q_unquantized)
        assert torch.equal(layer.last_per_rank["kv_a_layernorm"][rank].output, result.k_normed)
    unfused = md.run_layer(cfg, ckpt, hidden, positions, tp_size=2, platform="mi355x", scenario="vllm-baseline")
    # One rounding (fp32 -> fp8) where the unfused path rounds twice (fp32 -> bf16 -> fp8): FP8 noise apart.
    assert 0 < rel(run.records["q_b_proj"].output, unfused.records["q_b_proj"].output) < 0.05


def test_v3_fused_producer_in_the_other_order_is_a_scale_order_violation(kv512):
    """A producer writing COL_MAJOR for a ROW_MAJOR reader: wrong for every M > 1 and, at M == 1, recorded
    but harmless (the bytes coincide)."""
    cfg, ckpt = kv512
    hidden, positions = varied_tokens(cfg)
    truth = md.run_layer(cfg, ckpt, hidden, positions)
    right = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario=fused_v3())
    run = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario=fused_v3(transpose=True))
    (violation,) = run.records["q_b_proj"].violations
    assert violation.kind is ViolationKind.SCALE_ORDER and violation.effective
    assert (violation.expected, violation.found) == (ScaleLayout.ROW_MAJOR, ScaleLayout.COL_MAJOR)
    # Measured: 0.011 (right order) against 0.19 at q_b_proj, 0.02 against 0.55 at the output.
    assert rel(right.records["q_b_proj"].output, truth.records["q_b_proj"].output) < 0.03
    assert rel(run.records["q_b_proj"].output, truth.records["q_b_proj"].output) > 0.1
    assert rel(run.output, truth.output) > 0.3
    one = md.run_layer(cfg, ckpt, hidden[:1], positions[:1], platform="mi355x", scenario=fused_v3(transpose=True))
    (harmless,) = one.records["q_b_proj"].violations
    assert not harmless.effective


def test_the_compile_pass_only_fuses_where_its_pattern_matches(kv512):
    """No fusion when q_b_proj's kernel quantizes its own input column-major (the pass matches a row-major
    group quant only), nor for an epsilon the pass is not registered for; the note says why."""
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg, n=4)
    col_major = md.scenario(
        {
            "base": "vllm-pr56433",
            "name": "preshuffled-q_b",
            "overrides": {"q_b_proj": "aiter-bpreshuffle"},
            "behaviour": {"v3_fused_norm_quant": True},
        }
    )
    # q_lora_rank 1536: q_b_proj is (3072, 1536), a shape the preshuffled kernel has a tuned row for.
    wide = cfg.with_(name="tiny-lq1536", q_lora_rank=1536)
    run = md.run_layer(
        wide, md.Checkpoint.synthetic(wide, seed=3), hidden, positions, platform="mi355x", scenario=col_major
    )
    assert run.kernels["q_b_proj"].kernel == "aiter-bpreshuffle"
    record = run.records["q_a_layernorm"]
    assert record.kernel == "rmsnorm"
    assert any("matches only a ROW_MAJOR 1x128 group quant" in note for note in record.notes)
    odd_eps = cfg.with_(name="tiny-eps", rms_norm_eps=1e-7)
    odd_ckpt = md.Checkpoint.synthetic(odd_eps, seed=3)
    run = md.run_layer(odd_eps, odd_ckpt, hidden, positions, platform="mi355x", scenario=fused_v3())
    assert run.records["q_a_layernorm"].kernel == "rmsnorm"
    assert any("rms_norm_eps=1e-07" in note for note in run.records["q_a_layernorm"].notes)


def test_v3_fused_producer_backends_agree_bitwise(kv512):
    """The one mechanism shared with DeepSeek-V4: the Triton producer gives the torch producer's bytes."""
    pytest.importorskip("triton")
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg, n=4)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    outputs = []
    for backend in ("torch", "triton"):
        scen = scenario("vllm-baseline", f"v3-{backend}", v3_fused_norm_quant=True, norm_quant_backend=backend)
        run = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario=scen, device=device)
        assert run.records["q_a_layernorm"].kernel == f"fused_qk_rmsnorm_group_quant ({backend})"
        outputs.append(run.output)
    assert torch.equal(*outputs)


def test_a_replaced_fused_producer_output_is_refused(kv512):
    """Its consumer reads the FP8 data, not the recorded output: replacing the record would not reach it."""
    cfg, ckpt = kv512
    hidden, positions = tokens(cfg, n=4)
    layer = md.MLALayer(cfg, ckpt, 1, "mi355x", fused_v3())
    with pytest.raises(ValueError, match="q_a_layernorm.*consumers \\(q_b_proj\\) read its FP8 data"):
        layer.run(hidden, positions, hooks={"q_a_layernorm": lambda record, state: record.output * 2})


# -- DeepSeek-V4.1: wo_a loses is_bmm on ROCm -------------------------------------------------------------


def test_v41_resets_wo_a_is_bmm_and_a_preshuffling_kernel_takes_it(tiny_v4):
    """Under PR #56433's flag-honouring kernel, wo_a stays plain while it is flagged; DeepSeek-V4.1's
    ROCm model resets the flag, so the kernel shuffles wo_a under its direct reader (defect 3 again)."""
    cfg, ckpt = tiny_v4
    hidden, positions = tokens(cfg)
    reference = md.run_layer(cfg, ckpt, hidden, positions)
    v41 = scenario("vllm-pr56433", "v41", v4_wo_a_is_bmm=False)
    fixed = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario="vllm-pr56433")
    broken = md.run_layer(cfg, ckpt, hidden, positions, platform="mi355x", scenario=v41)
    assert fixed.records["wo_a"].violations == []
    (violation,) = broken.records["wo_a"].violations
    assert violation.kind is ViolationKind.RELAID_WEIGHT_DIRECT_READ and violation.effective
    assert violation.found.shufflers == ("aiter-bpreshuffle.process_weights_after_loading",)
    assert rel(broken.output, reference.output) > 0.5
    assert broken.events["wo_a"][0].startswith("model reset is_bmm = False")
    # The reset is the ROCm attention class's: on NVIDIA the model keeps the flag.
    nvidia = md.run_layer(cfg, ckpt, hidden, positions, platform="h200", scenario=v41)
    assert not any("model reset" in event for event in nvidia.events["wo_a"])


def test_deepseek_v41_preset_has_the_wheels_widths():
    cfg = md.MLAConfig.preset("deepseek-v4.1")
    assert (cfg.hidden_size, cfg.q_lora_rank, cfg.num_heads, cfg.head_dim, cfg.qk_rope_head_dim) == (
        5120,
        1280,
        64,
        512,
        64,
    )
    assert (cfg.o_groups, cfg.o_lora_rank, cfg.index_n_heads, cfg.index_head_dim) == (8, 1024, 32, 128)
    assert (cfg.sliding_window, cfg.index_topk, cfg.rms_norm_eps) == (128, 512, 1e-20)
    cfg.check_tp(8)
    # wo_a per rank at TP4: 2 groups x 1024 rows, 8 heads x 512 columns a group.
    assert (cfg.o_groups // 4 * cfg.o_lora_rank, cfg.num_heads // cfg.o_groups * cfg.head_dim) == (2048, 4096)
