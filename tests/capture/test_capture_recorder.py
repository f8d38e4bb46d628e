"""md.capture on transformers' DeepSeek-V3 in this process: what it records beyond the module calls,
how it bounds itself, and the errors it gives."""

from __future__ import annotations

import pytest
import torch
from capture_models import LAYER, TOKENS, input_ids, tiny_config
from torch import nn

import mla_debug as md
from mla_debug.capture import Shard, TensorRole

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return transformers.DeepseekV3ForCausalLM(tiny_config()).eval()


def forward(model, ids=None):
    with torch.no_grad():
        model(input_ids() if ids is None else ids)


def attention(model):
    return model.model.layers[LAYER].self_attn


def test_record_keeps_a_tensor_the_hooks_cannot_see_with_its_strides(model, tmp_path):
    # An activation scale as a column-major producer leaves it: shape (M, G), strides (1, M).
    scale = torch.rand(2, TOKENS).t()
    with md.capture(model, tmp_path / "c", layer=LAYER) as cap:
        forward(model)
        cap.record("q_b_proj.input_scale", scale)
        assert md.capture.record("kv_b_proj.input_scale", scale[:, :1]) == 1
    assert md.capture.record("q_b_proj.input_scale", scale) == 0  # no capture open: nothing taken
    loaded = md.load_capture(tmp_path / "c").rank(0)["q_b_proj.input_scale"]
    assert loaded.role is TensorRole.INPUT_SCALE and loaded.step == "q_b_proj"
    assert loaded.tensor.stride() == (1, TOKENS) and torch.equal(loaded.tensor, scale)


def test_record_refuses_what_it_cannot_place(model, tmp_path):
    with md.capture(model, tmp_path / "c", layer=LAYER) as cap:
        forward(model)
        with pytest.raises(ValueError, match=r"cannot tell its role from the name; pass role="):
            cap.record("mystery", torch.ones(2))
        cap.record("mystery", torch.ones(2), role="output")
        with pytest.raises(ValueError, match="'mystery' was already recorded"):
            cap.record("mystery", torch.ones(2), role="output")
    with pytest.raises(RuntimeError, match="the capture is not open"):
        cap.record("late", torch.ones(1), role="output")


def test_a_layer_that_never_ran_writes_nothing(model, tmp_path):
    with pytest.raises(RuntimeError, match=r"was called 0 time\(s\) inside the capture, so call 0 was not recorded"):
        with md.capture(model, tmp_path / "c", layer=LAYER):
            pass
    assert not (tmp_path / "c").exists()


def test_an_error_inside_the_block_writes_nothing(model, tmp_path):
    with pytest.raises(KeyError, match="boom"):
        with md.capture(model, tmp_path / "c", layer=LAYER):
            forward(model)
            raise KeyError("boom")
    assert not (tmp_path / "c").exists()
    # ... and leaves no hook behind.
    assert not attention(model)._forward_hooks and not attention(model).q_b_proj._forward_pre_hooks


def test_tokens_out_of_range_are_named(model, tmp_path):
    with pytest.raises(ValueError, match=rf"tokens \[{TOKENS}, 40\] are out of range: the layer input has {TOKENS} token rows"):
        with md.capture(model, tmp_path / "c", layer=LAYER, tokens=[0, TOKENS, 40]):
            forward(model)


def test_an_existing_capture_is_never_overwritten(model, tmp_path):
    with md.capture(model, tmp_path / "c", layer=LAYER):
        forward(model)
    before = (tmp_path / "c" / "rank0-of-1" / "manifest.json").read_text()
    with pytest.raises(FileExistsError, match=r"rank0-of-1 already exists; refusing to overwrite it"):
        md.capture(model, tmp_path / "c", layer=LAYER)
    assert (tmp_path / "c" / "rank0-of-1" / "manifest.json").read_text() == before


def test_the_chosen_call_is_the_one_recorded(model, tmp_path):
    second = (input_ids() * 5 + 1) % 96
    hidden = []

    def keep(module, args, kwargs):
        hidden.append(kwargs["hidden_states"].clone())

    handle = attention(model).register_forward_pre_hook(keep, with_kwargs=True)
    try:
        with md.capture(model, tmp_path / "c", layer=LAYER, call=1, tokens=[2, 7]):
            forward(model)
            forward(model, second)
    finally:
        handle.remove()
    cap = md.load_capture(tmp_path / "c")
    assert torch.equal(cap.hidden, hidden[1][0, [2, 7]])
    assert cap.gathered("q_b_proj.input").shape == (2, 128)


def test_a_weights_only_capture_needs_no_forward(model, tmp_path):
    with md.capture(model, tmp_path / "c", layer=LAYER, activations=False):
        pass
    cap = md.load_capture(tmp_path / "c")
    assert cap.names(TensorRole.INPUT) == [] and cap.manifest.tokens == ()
    assert len(cap.names(TensorRole.WEIGHT)) == 7
    assert torch.equal(cap.checkpoint().tensors["kv_b_proj.weight"], attention(model).kv_b_proj.weight.detach())


def test_engine_flags_and_kernels_are_recorded_and_a_relaid_weight_is_no_checkpoint(tmp_path):
    torch.manual_seed(1)
    model = transformers.DeepseekV3ForCausalLM(tiny_config()).eval()
    kv_b = attention(model).kv_b_proj

    class AiterPreshuffledFp8BlockScaledMMKernel:  # named like the engine's kernel class
        pass

    kv_b.weight.is_shuffled = True
    kv_b.aiter_bpreshuffled = True
    kv_b.quant_method = type("Fp8LinearMethod", (), {})()
    kv_b.quant_method.fp8_linear = AiterPreshuffledFp8BlockScaledMMKernel()
    with md.capture(model, tmp_path / "c", layer=LAYER, activations=False):
        pass
    cap = md.load_capture(tmp_path / "c")
    attrs = cap.rank(0)["kv_b_proj.weight"].attrs
    assert attrs["is_shuffled"] is True and attrs["aiter_bpreshuffled"] is True
    assert attrs["kernel"] == "AiterPreshuffledFp8BlockScaledMMKernel" and attrs["quant_method"] == "Fp8LinearMethod"
    with pytest.raises(ValueError, match=r"kv_b_proj.weight is marked is_shuffled=True, aiter_bpreshuffled=True"):
        cap.checkpoint()


class TinyMLA(nn.Module):
    """A user's own module tree: other attribute names, called as attn(x, pos)."""

    def __init__(self, cfg: md.MLAConfig) -> None:
        super().__init__()
        h, lq, lkv, r = cfg.hidden_size, cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_rope_head_dim
        self.down = nn.Linear(h, lq + lkv + r, bias=False)
        self.up_q = nn.Linear(lq, cfg.num_heads * (cfg.qk_nope_head_dim + r), bias=False)
        self.out = nn.Linear(cfg.num_heads * cfg.v_head_dim, h, bias=False)
        self.lq, self.width = lq, cfg.num_heads * cfg.v_head_dim

    def forward(self, x, pos):
        q = self.up_q(self.down(x)[..., : self.lq])
        return self.out(q[..., : self.width])


def test_a_user_map_captures_any_module_tree(tmp_path):
    cfg = md.MLAConfig.preset("tiny")
    root = nn.Module()
    root.layers = nn.ModuleList([nn.Module(), nn.Module()])
    for layer in root.layers:
        layer.attn = TinyMLA(cfg)
    names = {"@attention": "attn", "down": "fused_qkv_a_proj", "up_q": "q_b_proj", "out": "o_proj"}
    names_map = md.capture.user_map(names, positions_arg=md.capture.Argument("pos", 1))
    x = torch.randn(1, 5, cfg.hidden_size)
    with md.capture(root, tmp_path / "c", layer=1, names=names_map, cfg=cfg):
        root.layers[1].attn(x, torch.arange(5).unsqueeze(0) + 10)
    cap = md.load_capture(tmp_path / "c")
    assert cap.manifest.engine.name == "user" and cap.manifest.positions == tuple(range(10, 15))
    assert cap.rank(0)["q_b_proj.weight"].source_name == "layers.1.attn.up_q.weight"
    assert torch.equal(cap.gathered("layer.output"), root.layers[1].attn(x, None)[0].detach())
    assert cap.rank(0)["o_proj.output"].shard is Shard.REPLICATED
    with pytest.raises(ValueError, match=r"'up_q' -> 'q_up' is neither a canonical module"):
        md.capture.user_map({"up_q": "q_up"})


def test_the_function_form_returns_the_rank_folder(model, tmp_path):
    path = md.capture.capture_call(model, tmp_path / "c", lambda: forward(model), layer=LAYER, tokens=[0])
    assert path == tmp_path / "c" / "rank0-of-1"
    assert md.load_capture(tmp_path / "c").gathered("layer.output").shape == (1, 256)


def test_an_unknown_tree_asks_for_a_map(tmp_path):
    with pytest.raises(ValueError, match=r"no module at '...layers.0.<attention>' of a known attention class"):
        md.capture(nn.Linear(2, 2), tmp_path / "c", layer=0)


def test_deepseek_v32_attention_is_captured_with_its_own_map(tmp_path):
    """V3.2's attention is V3's plus an indexer; with fewer tokens than index_topk its sparse selection
    keeps every token, so the captured layer is the dense MLA layer run_layer computes."""
    config = transformers.DeepseekV32Config(
        **{k: v for k, v in tiny_config().to_dict().items() if k in transformers.DeepseekV3Config().to_dict()
           and k not in ("model_type", "architectures", "transformers_version")},
        index_n_heads=4, index_head_dim=64, index_topk=64,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(2)
    model = transformers.DeepseekV32ForCausalLM(config).eval()
    with md.capture(model, tmp_path / "c", layer=LAYER) as cap:
        forward(model)
    assert cap.name_map.key == "transformers-deepseek_v32"
    captured = md.load_capture(tmp_path / "c")
    assert not any(name.startswith("indexer") for name in captured.names())
    run = md.run_layer(captured.cfg, captured.checkpoint(), captured.hidden, captured.positions, dtype=torch.float32)
    assert md.numerics.error_metrics(run.output, captured.gathered("layer.output"))["rel_l2"] < 1e-5
