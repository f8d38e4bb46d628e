"""Builders and probes shared by the checkpoint tests."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from released_configs import DEEPSEEK_V3_JSON
from safetensors.torch import save_file

import mla_debug.model.checkpoint as checkpoint_module
from mla_debug.model import Checkpoint, MLAConfig

ATTN = "model.layers.{layer}.self_attn."


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor (so -0.0 != +0.0 and NaN == NaN)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert list(a) == list(b) or set(a) == set(b), (sorted(a), sorted(b))
    different = [k for k in a if not same_bytes(a[k], b[k])]
    assert different == [], f"tensors differ: {different}"


def prefixed(ckpt: Checkpoint, layer: int | None = None) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under a model's key names."""
    prefix = ATTN.format(layer=ckpt.layer if layer is None else layer)
    return {prefix + k: t for k, t in ckpt.tensors.items()}


def write_sharded(folder: Path, cfg: MLAConfig, shards: dict[str, dict[str, torch.Tensor]], index: bool = True) -> Path:
    """A Hugging Face folder: config.json, the given shard files and (optionally) the index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg.to_hf()))
    weight_map = {}
    for name, tensors in shards.items():
        save_file({k: t.contiguous() for k, t in tensors.items()}, str(folder / name))
        weight_map.update({key: name for key in tensors})
    if index:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


class SafeOpenSpy:
    """Wraps `safe_open` inside mla_debug.model.checkpoint, recording opened files, fetched keys and keys
    whose header entry (dtype, shape) was looked at."""

    def __init__(self, monkeypatch) -> None:
        self.opened: list[str] = []
        self.fetched: list[str] = []
        self.sliced: list[str] = []
        real = checkpoint_module.safe_open
        spy = self

        class Handle:
            def __init__(self, path, framework, **kwargs):
                spy.opened.append(Path(path).name)
                self._inner = real(path, framework=framework, **kwargs)

            def __enter__(self):
                self._handle = self._inner.__enter__()
                return self

            def __exit__(self, *exc):
                return self._inner.__exit__(*exc)

            def keys(self):
                return self._handle.keys()

            def get_tensor(self, key):
                spy.fetched.append(key)
                return self._handle.get_tensor(key)

            def get_slice(self, key):
                # The header's dtype and shape of `key`; indexing the slice would read bytes, so it counts.
                spy.sliced.append(key)
                return self._handle.get_slice(key)

        monkeypatch.setattr(checkpoint_module, "safe_open", Handle)


# -- checkpoints made by code that is not this package's ---------------------------------------------------
#
# DeepSeek's published format, written here from its convention (not with mla_debug.numerics, which is what
# the tests check): every linear weight of the attention and the MLP is float8_e4m3fn in 128x128 blocks with
# a float32 `<module>.weight_scale_inv` of shape (ceil(N/128), ceil(K/128)) that MULTIPLIES on
# dequantization. The scale of a block is max(amax, 1e-4) / 448 (DeepGEMM's per_block_cast_to_fp8, which
# DeepSeek's inference code and the engines vendor), rounded up to a power of two when the config says
# `scale_fmt: ue8m0` (DeepSeek-V3.1 and later); values are x * (1 / scale), cast. Embeddings, the LM head,
# norms, the MoE router and the V3.2 indexer's weights_proj stay bf16. Shards are model-0000i-of-0000n
# files named by model.safetensors.index.json.

E4M3_MAX = 448.0
DEEPSEEK_BLOCK = 128
DEEPSEEK_QUANTIZATION = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [DEEPSEEK_BLOCK, DEEPSEEK_BLOCK],
}
# 2-D weights DeepSeek's release keeps in bf16 (the rest of every layer's linear weights are fp8).
_DEEPSEEK_DENSE = ("embed_tokens.weight", "lm_head.weight", "mlp.gate.weight", "indexer.weights_proj.weight")


def deepseek_block_cast(w: torch.Tensor, ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 e4m3fn weight, fp32 weight_scale_inv) of a 2-D weight, by DeepSeek's published convention."""
    n, k = w.shape
    b = DEEPSEEK_BLOCK
    nb, kb = -(-n // b), -(-k // b)
    padded = torch.zeros(nb * b, kb * b, dtype=torch.float32)
    padded[:n, :k] = w.float()
    blocks = padded.view(nb, b, kb, b)
    scale = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4) / E4M3_MAX
    if ue8m0:
        scale = torch.pow(2.0, torch.ceil(torch.log2(scale)))
    q = (blocks * (1.0 / scale)).to(torch.float8_e4m3fn).view(nb * b, kb * b)[:n, :k].contiguous()
    return q, scale.view(nb, kb).contiguous()


def deepseek_dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float32 values of a DeepSeek-format weight: every fp8 value times its block's weight_scale_inv."""
    b = DEEPSEEK_BLOCK
    expanded = scale.repeat_interleave(b, dim=0).repeat_interleave(b, dim=1)[: q.shape[0], : q.shape[1]]
    return q.float() * expanded


def deepseek_stores_fp8(key: str, tensor: torch.Tensor) -> bool:
    """Whether DeepSeek's release stores tensor `key` as fp8 with a weight_scale_inv."""
    return tensor.dim() == 2 and key.endswith(".weight") and not key.endswith(_DEEPSEEK_DENSE)


def write_new_folder(out: Path, write: Callable[[Path], object]) -> Path:
    """`write(folder)` into a fresh folder beside `out`, then renamed to `out`: a reader never sees a half-written
    folder and an interrupted run leaves nothing. FileExistsError if `out` exists: nothing is overwritten."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; remove it first (or pass --out for a new folder)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        write(tmp)
        for file in tmp.iterdir():
            os.chmod(file, 0o644)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0o700
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_deepseek_checkpoint(
    folder: Path, config: dict, state: dict[str, torch.Tensor], shards: list[list[str]], ue8m0: bool = False
) -> Path:
    """A Hugging Face folder in DeepSeek's published format: config.json (with DeepSeek's
    quantization_config), one model-0000i-of-0000n.safetensors per entry of `shards` (key prefixes; each
    tensor goes to the first shard whose prefix it starts with) and model.safetensors.index.json."""
    folder.mkdir(parents=True, exist_ok=True)
    quantization = dict(DEEPSEEK_QUANTIZATION, **({"scale_fmt": "ue8m0"} if ue8m0 else {}))
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": quantization}, indent=2) + "\n")
    files: list[dict[str, torch.Tensor]] = [{} for _ in shards]
    for key, tensor in state.items():
        shard = next((i for i, prefixes in enumerate(shards) if key.startswith(tuple(prefixes))), None)
        if shard is None:
            raise ValueError(f"tensor {key} matches no shard's prefixes")
        if deepseek_stores_fp8(key, tensor):
            q, scale = deepseek_block_cast(tensor, ue8m0)
            files[shard][key] = q
            files[shard][key.removesuffix(".weight") + ".weight_scale_inv"] = scale
        else:
            files[shard][key] = tensor.to(torch.bfloat16).contiguous()
    weight_map, total = {}, 0
    for i, tensors in enumerate(files):
        name = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        weight_map.update({key: name for key in tensors})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return folder


def transformers_model_state(model_cls, config, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor of transformers' `model_cls(config)` under transformers' (the release's) names and
    shapes, with seeded bf16 values: linear weights normal with std 0.5/sqrt(K), norm weights
    uniform in [0.5, 1.5], biases small. The module is built on the meta device (no init runs), so the
    values depend only on the seed and the names, not on transformers' initialisers."""
    with torch.device("meta"):
        model = model_cls(config)
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for key, meta in model.state_dict().items():
        if key.endswith(".bias"):
            values = torch.randn(meta.shape, generator=gen) * 0.1
        elif meta.dim() == 1:
            values = torch.rand(meta.shape, generator=gen) + 0.5
        else:
            values = torch.randn(meta.shape, generator=gen) * (0.5 / meta.shape[-1] ** 0.5)
        state[key] = values.to(torch.bfloat16)
    return state


def tiny_deepseek_config(model_type: str = "deepseek_v32", **overrides) -> dict:
    """A DeepSeek-style config.json of a tiny model (as DeepSeek writes them: rope_scaling with yarn, no
    quantization_config - `write_deepseek_checkpoint` adds it): 2 layers with dense MLPs, DeepSeek-V3's
    head widths (P = V = 128, R = 64) on 16 heads, so that every per-rank shard up to TP8 is a multiple
    of 128. `model_type` deepseek_v32 adds the indexer's fields."""
    config = {
        "architectures": ["DeepseekV32ForCausalLM" if model_type == "deepseek_v32" else "DeepseekV3ForCausalLM"],
        "model_type": model_type,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "first_k_dense_replace": 2,
        "hidden_act": "silu",
        "hidden_size": 256,
        "intermediate_size": 128,
        "kv_lora_rank": 256,
        "max_position_embeddings": 163840,
        "moe_intermediate_size": 64,
        "n_group": 1,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 16,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 2,
        "num_key_value_heads": 16,
        "q_lora_rank": 128,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "rms_norm_eps": 1e-06,
        "rope_scaling": dict(DEEPSEEK_V3_JSON["rope_scaling"]),  # DeepSeek-V3's yarn, as released
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "torch_dtype": "bfloat16",
        "v_head_dim": 128,
        "vocab_size": 64,
    }
    if model_type == "deepseek_v32":
        config.update(index_head_dim=128, index_n_heads=4, index_topk=32)
    config.update(overrides)
    return dict(sorted(config.items()))


def transformers_config(config: dict):
    """transformers' own config class for a DeepSeek config.json dict (DeepseekV3Config / DeepseekV32Config)."""
    import transformers

    cls = transformers.DeepseekV32Config if config["model_type"] == "deepseek_v32" else transformers.DeepseekV3Config
    return cls(**{k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype")})


def fp8_cast_bf16(src, dst):
    """What DeepSeek's fp8_cast_bf16.py makes of an FP8 checkpoint: every fp8 weight times its block scale,
    in bf16, the scales dropped, quantization_config removed from config.json."""
    from safetensors.torch import load_file

    dst.mkdir()
    index = json.loads((src / "model.safetensors.index.json").read_text())
    weight_map = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors = load_file(str(src / shard))
        out = {}
        for key, tensor in tensors.items():
            if key.endswith("_scale_inv"):
                continue
            if tensor.dtype == torch.float8_e4m3fn:
                scale = tensors[key.removesuffix(".weight") + ".weight_scale_inv"]
                tensor = deepseek_dequantize(tensor, scale).to(torch.bfloat16)
            out[key] = tensor
        save_file(out, str(dst / shard))
        weight_map.update({key: shard for key in out})
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = json.loads((src / "config.json").read_text())
    del config["quantization_config"]
    (dst / "config.json").write_text(json.dumps(config))
    return dst
