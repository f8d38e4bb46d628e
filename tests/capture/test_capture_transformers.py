"""transformers' DeepSeek-V3 as the engine under test: captured at TP1 in this process and at TP2 and
TP4 through transformers' own tensor parallelism (torchrun, gloo on CPU, tests/capture/tp_capture_run.py).

Bounds: fp32 captures against md.run_layer on the captured weights differ only in fp32 summation order
(rel_l2 < 1e-5, as in the transformers oracle test). A bf16 model computes every op in bf16 with its
own op order; run_layer in bf16 on the same weights lands within rel_l2 < 2e-2 of it (measured around
4e-3: a few bf16 roundings of 2^-9 each). Gathered TP2/TP4 weights equal TP1's byte for byte; their
activations equal TP1's within the fp32 summation-order bound (the decoder's MLP before the captured
layer is split over ranks too, so TP4's layer input already differs from TP1's in the last bits).
"""

from __future__ import annotations

import pytest
import torch
from capture_models import KEPT, LAYER, TOKENS, input_ids, run_torchrun, save_tiny_model

import mla_debug as md
from mla_debug.capture import Shard, TensorRole

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

FP32_BOUND = 1e-5
BF16_BOUND = 2e-2


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return md.numerics.error_metrics(a.float(), b.float())["rel_l2"]


def capture_in_process(model_dir, out, dtype=torch.float32, **options):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=dtype)
    with md.capture(model.eval(), out, layer=LAYER, **options) as cap, torch.no_grad():
        model(input_ids())
    return cap


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-deepseek-v3") / "model")


@pytest.fixture(scope="module")
def tp1(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tp1") / "capture"
    capture_in_process(model_dir, out, mode="prefill")
    return md.load_capture(out)


@pytest.fixture(scope="module")
def tp2_kept(model_dir, tmp_path_factory):
    """TP2, keeping only the rows KEPT (a bounded capture)."""
    out = tmp_path_factory.mktemp("tp2") / "capture"
    run_torchrun(model_dir, out, 2, tokens="kept")
    return md.load_capture(out)


@pytest.fixture(scope="module")
def tp4(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tp4") / "capture"
    run_torchrun(model_dir, out, 4)
    return md.load_capture(out)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def test_tp1_capture_matches_run_layer_on_its_own_weights(tp1):
    assert tp1.tp_size == 1 and tp1.manifest.engine.name == "transformers"
    assert tp1.manifest.mode == "prefill" and tp1.manifest.positions == tuple(range(TOKENS))
    run = md.run_layer(tp1.cfg, tp1.checkpoint(), tp1.hidden, tp1.positions, tp_size=1, dtype=torch.float32)
    assert rel_l2(run.output, tp1.gathered("layer.output")) < FP32_BOUND
    # Step by step too: the q and kv up-projections and the output projection's input.
    for name, step in (("q_b_proj.output", "q_b_proj"), ("kv_b_proj.output", "kv_b_proj")):
        ours = run.records[step].output.reshape(TOKENS, -1)
        assert rel_l2(ours, tp1.gathered(name)) < FP32_BOUND, name


def test_tp1_weights_are_the_modules_bytes(model_dir, tp1):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    attention = model.model.layers[LAYER].self_attn
    for module in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "q_a_layernorm"):
        captured = tp1.rank(0).tensors[f"{module}.weight"]
        assert captured.source_name == f"model.layers.{LAYER}.self_attn.{module}.weight"
        assert torch.equal(as_bytes(captured.tensor), as_bytes(getattr(attention, module).weight.detach()))


def test_a_bf16_model_is_captured_in_bf16_and_matches_run_layer_within_the_bf16_bound(model_dir, tmp_path):
    bf16_dir = save_tiny_model(tmp_path / "bf16-model", dtype=torch.bfloat16)
    capture_in_process(bf16_dir, tmp_path / "capture", dtype=torch.bfloat16)
    cap = md.load_capture(tmp_path / "capture")
    assert cap.gathered("q_b_proj.weight").dtype == torch.bfloat16
    assert cap.gathered("layer.output").dtype == torch.bfloat16
    run = md.run_layer(cap.cfg, cap.checkpoint(), cap.hidden, cap.positions, tp_size=1, dtype=torch.bfloat16)
    assert rel_l2(run.output, cap.gathered("layer.output")) < BF16_BOUND


def test_tp4_shards_the_attention_and_gathers_to_tp1s_weights_byte_for_byte(tp1, tp4):
    assert [r.rank for r in tp4.ranks] == [0, 1, 2, 3]
    rank = tp4.rank(2)
    assert rank["q_b_proj.weight"].shard is Shard.SPLIT and rank["q_b_proj.weight"].shard_dim == 0
    assert rank["o_proj.weight"].shard_dim == 1 and "Shard(dim=1)" in rank["o_proj.weight"].attrs["dtensor_placements"]
    assert rank["q_b_proj.weight"].tensor.shape[0] * 4 == tp1.gathered("q_b_proj.weight").shape[0]
    weights = tp1.names(TensorRole.WEIGHT)
    assert len(weights) == 7
    for name in weights:
        assert torch.equal(as_bytes(tp4.gathered(name)), as_bytes(tp1.gathered(name))), name


def test_tp4_activations_gather_to_tp1s_within_the_fp32_bound(tp1, tp4):
    assert tp4.rank(1)["q_b_proj.output"].shard is Shard.SPLIT
    # transformers all-reduces o_proj inside the module, so its output is whole on every rank.
    assert tp4.rank(1)["o_proj.output"].shard is Shard.REPLICATED
    activations = tp1.names(TensorRole.INPUT) + tp1.names(TensorRole.OUTPUT)
    assert {"layer.input", "q_b_proj.output", "kv_b_proj.output", "o_proj.input", "layer.output"} <= set(activations)
    for name in activations:
        assert tp4.gathered(name).shape == tp1.gathered(name).shape, name
        assert rel_l2(tp4.gathered(name), tp1.gathered(name)) < FP32_BOUND, name


def test_a_bounded_tp2_capture_keeps_the_chosen_rows_of_every_activation(tp1, tp2_kept):
    assert tp2_kept.manifest.tokens == KEPT and tp2_kept.manifest.positions == KEPT
    kept = list(KEPT)
    for name in tp1.names(TensorRole.OUTPUT):
        ours, full = tp2_kept.gathered(name), tp1.gathered(name)
        assert ours.shape == (len(kept), full.shape[1]), name
        assert rel_l2(ours, full[kept]) < FP32_BOUND, name
    for name in tp1.names(TensorRole.WEIGHT):
        assert torch.equal(as_bytes(tp2_kept.gathered(name)), as_bytes(tp1.gathered(name))), name
    # The rows left out are keys of the kept ones: kept as the context, up to the last kept position.
    left_out = [t for t in range(max(KEPT) + 1) if t not in KEPT]
    assert tp2_kept.gathered("context.positions").tolist() == left_out
    assert rel_l2(tp2_kept.gathered("context.input"), tp1.hidden[left_out]) < FP32_BOUND
    assert tp2_kept.manifest.key_positions == tuple(range(max(KEPT) + 1))


def test_a_decode_call_is_captured_with_the_kv_context_it_read(model_dir, tmp_path):
    """generate() calls the layer once for the prompt and once per new token; the decode call reads the
    prompt's keys from transformers' cache (where kv_b_proj runs over every cached latent row)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    with (
        md.capture(model, tmp_path / "prefill", layer=LAYER, call=0),
        md.capture(model, tmp_path / "decode", layer=LAYER, call=1),
        torch.no_grad(),
    ):
        model.generate(input_ids(), max_new_tokens=2, do_sample=False)
    prefill, decode = md.load_capture(tmp_path / "prefill"), md.load_capture(tmp_path / "decode")
    assert (prefill.manifest.mode, decode.manifest.mode) == ("prefill", "decode")
    assert prefill.manifest.key_positions == tuple(range(TOKENS)) and "context.input" not in prefill.names()
    assert decode.manifest.positions == (TOKENS,)
    assert decode.manifest.key_positions == tuple(range(TOKENS + 1))
    # The context is the prompt call's layer input, copied: byte for byte.
    assert torch.equal(as_bytes(decode.gathered("context.input")), as_bytes(prefill.hidden))
    assert decode.gathered("context.positions").tolist() == list(range(TOKENS))
    # kv_b_proj ran over 13 cached rows; the capture keeps the decode row's.
    kv_b = decode.rank(0)["kv_b_proj.output"]
    assert kv_b.tensor.shape[0] == 1 and "kept at the call's positions" in kv_b.attrs["rows"]


def test_a_capture_entered_after_the_prompt_knows_the_keys_it_lacks(model_dir, tmp_path):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    ids = input_ids()
    with torch.no_grad():
        first = model(ids, use_cache=True)
        following = first.logits[:, -1:].argmax(-1)
        with md.capture(model, tmp_path / "decode", layer=LAYER):
            model(following, cache=first.past_key_values, position_ids=torch.tensor([[TOKENS]]))
    decode = md.load_capture(tmp_path / "decode")
    assert decode.manifest.mode == "decode"
    assert decode.manifest.key_positions == tuple(range(TOKENS + 1))
    assert "context.input" not in decode.names()  # the prompt ran before the capture was entered
