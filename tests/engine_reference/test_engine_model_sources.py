"""The engine facts the model-side behaviours encode, read again from the released wheels: every cited
file and function exists and still says what the docstrings say it says (vLLM 0.33.0, SGLang 0.5.23)."""

from __future__ import annotations

import ast

from engine_wheels import require, source

import mla_debug as md


def function_source(package: str, member: str, qualname: str) -> str:
    """The source of top-level function or ``Class.method`` `qualname` in the wheel's file `member`."""
    require(package)
    text = source(package, member)
    scope: list[ast.stmt] = ast.parse(text).body
    node = None
    for part in qualname.split("."):
        node = next(
            (n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part),
            None,
        )
        assert node is not None, f"{package} {member} has no {qualname}"
        scope = node.body
    return ast.get_source_segment(text, node)


def method_source(package: str, member: str, name: str) -> str:
    """The source of the one function or method called `name` anywhere in the wheel's file `member`."""
    require(package)
    text = source(package, member)
    (found,) = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == name]
    return ast.get_source_segment(text, found)


def in_order(text: str, *needles: str) -> bool:
    positions = [text.find(needle) for needle in needles]
    return -1 not in positions and positions == sorted(positions)


def test_vllm_derives_w_uk_at_the_activation_dtype_after_the_kernels():
    split = function_source("vllm", "vllm/model_executor/layers/attention/mla_attention.py", "split_kv_b_proj")
    assert "get_and_maybe_dequant_weights(kv_b_proj, out_dtype=out_dtype)" in split
    attention = function_source(
        "vllm", "vllm/model_executor/layers/attention/mla_attention.py", "MLAAttention.process_weights_after_loading"
    )
    (call,) = [
        n
        for n in ast.walk(ast.parse(attention))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "split_kv_b_proj"
    ]
    assert ast.unparse(call.args[1]) == "act_dtype"  # out_dtype: the activation dtype the loader passes
    dequant = function_source(
        "vllm", "vllm/model_executor/layers/quantization/utils/quant_utils.py", "scaled_dequantize"
    )
    assert "(x_q.to(torch.float32) * x_s).to(out_dtype)" in dequant
    loader = function_source("vllm", "vllm/model_executor/model_loader/utils.py", "process_weights_after_loading")
    # Every quant method first, the attention layers (which derive W_UK / W_UV) after.
    assert in_order(
        loader,
        "quant_method.process_weights_after_loading(module)",
        "module.process_weights_after_loading(model_config.dtype)",
    )


def test_vllm_compile_pass_feeds_q_b_proj_a_row_major_fused_quant():
    member = "vllm/compilation/passes/fusion/rocm_aiter_fusion.py"
    replacement = function_source("vllm", member, "MLADualRMSGroupQuantPattern.replacement")
    assert in_order(replacement, "fused_op(", "128,", "False,")  # group_size=128, transpose_scale=False
    registered = function_source("vllm", member, "MLADualRMSNormFusionPass.__init__")
    assert "for epsilon in [1e-5, 1e-6]:" in registered and "MLADualRMSGroupQuantPattern(epsilon)" in registered
    assert md.model.mla_v3.FUSION_PATTERN_EPSILONS == (1e-5, 1e-6)


def test_deepseek_v41_resets_wo_a_is_bmm_on_rocm_and_its_widths():
    init = function_source("vllm", "vllm/models/deepseek_v41/amd/rocm.py", "DeepseekV41ROCMAiterMLAAttention.__init__")
    assert "self.wo_a.is_bmm = False" in init
    plan = source("vllm", "vllm/models/deepseek_v41/amd/mono/attention/plan.py")
    constants = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(plan).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    cfg = md.MLAConfig.preset("deepseek-v4.1")
    assert (cfg.hidden_size, cfg.q_lora_rank, cfg.head_dim, cfg.qk_rope_head_dim) == (
        constants["HIDDEN"],
        constants["Q_RANK"],
        constants["HEAD_DIM"],
        constants["ROPE"],
    )
    assert (cfg.num_heads, cfg.o_groups, cfg.o_lora_rank) == (
        constants["N_HEADS"],
        constants["O_GROUPS"],
        constants["O_RANK"],
    )
    assert (cfg.sliding_window, cfg.index_topk, cfg.rms_norm_eps) == (
        constants["WINDOW"],
        constants["TOPK"],
        constants["EPS"],
    )
    indexer = source("vllm", "vllm/models/deepseek_v41/attention.py")
    assert "self.n_head = config.index_n_heads  # 32" in indexer and "config.index_head_dim  # 128" in indexer


def test_sglang_derives_w_kc_in_post_load_weights_from_the_layers_bytes():
    member = "sglang/srt/models/deepseek_common/deepseek_weight_loader.py"
    post = method_source("sglang", member, "post_load_weights")
    assert "w = self_attn.kv_b_proj.weight" in post
    assert in_order(post, "block_quant_to_tensor_quant(", "w_kc, w_vc = w.unflatten(")
    # load_weights ends with post_load_weights; the standard loader processes the weights after it.
    do_load = method_source("sglang", member, "do_load_weights")
    assert do_load.rstrip().endswith("self.post_load_weights(is_nextn=is_nextn, weight_names=weight_names)")
    standard = function_source(
        "sglang", "sglang/srt/model_loader/loader.py", "DefaultModelLoader.load_weights_and_postprocess"
    )
    assert in_order(standard, "load_weights_only(", "postprocess_weights(")


def test_sglang_remote_kv_loader_processes_then_copies_then_derives():
    remote = function_source(
        "sglang", "sglang/srt/model_loader/loader.py", "RemoteModelLoader._load_model_from_remote_kv"
    )
    assert in_order(
        remote,
        "quant_method.process_weights_after_loading(module)",
        "param_data.copy_(tensor)",
        "post_load_weights(model)",
    )


def test_sglang_absorbed_bmms_on_rocm():
    member = "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mla_rocm.py"
    q_bmm = function_source("sglang", member, "rocm_absorb_q_bmm")
    assert "batched_gemm_a8w8_a_per_token_group_prequant_w_per_batched_tensor_quant(" in q_bmm
    assert "group_size=128" in q_bmm and "_absorb_weight_bf16(attn.w_kc, attn.w_scale)" in q_bmm
    assert "return w.to(torch.bfloat16) * w_scale" in function_source("sglang", member, "_absorb_weight_bf16")


def test_sglang_per_tensor_requant_on_hip():
    requant = function_source("sglang", "sglang/srt/layers/quantization/fp8_utils.py", "block_quant_to_tensor_quant")
    assert "else input_to_float8(x_dq_block, dtype=x_q_block.dtype)" in requant
    assert "fp8_max = 224.0" in source("sglang", "sglang/kernels/ops/quantization/fp8_kernel.py")


def test_sglang_sharded_state_loader_processes_then_copies_then_derives():
    sharded = function_source("sglang", "sglang/srt/model_loader/loader.py", "ShardedStateLoader.load_model")
    assert in_order(
        sharded,
        "quant_method.process_weights_after_loading(module)",
        "param_data.copy_(tensor)",
        "post_load_weights(model)",
    )
    # what it copies in is what save_model wrote: the state dict of a running, processed model
    saved = function_source("sglang", "sglang/srt/model_loader/loader.py", "ShardedStateLoader.save_model")
    assert "state_dict = ShardedStateLoader._filter_subtensors(model.state_dict())" in saved


def test_sglang_remote_instance_loader_receives_processed_weights_then_derives():
    member = "sglang/srt/model_loader/loader.py"
    for method in ("load_model_from_remote_instance_by_nccl", "load_model_from_remote_instance_by_transfer_engine"):
        body = function_source("sglang", member, f"RemoteInstanceModelLoader.{method}")
        assert "process_weights_after_loading" not in body
        received = "torch.distributed.broadcast(" if method.endswith("nccl") else "batch_transfer_sync_read("
        assert in_order(body, received, "post_load_weights(model)")
    load = function_source("sglang", member, "RemoteInstanceModelLoader.load_model")
    assert "process_weights_after_loading" not in load


def test_sglang_gfx942_q_side_fp8_bmm_under_cuda_graphs():
    member = "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mla_rocm.py"
    q_bmm = function_source("sglang", member, "rocm_absorb_q_bmm")
    assert "is_capture_mode and attn.w_kc.dtype == torch.float8_e4m3fnuz" in q_bmm
    prepare = function_source("sglang", member, "DeepseekMLARocmForwardMixin.forward_absorb_rocm_prepare")
    assert "rocm_absorb_q_bmm( self, q_nope, is_capture_mode=get_is_capture_mode()" in " ".join(prepare.split())
