"""mla_debug's own reference run, as a Capture: the other side of a capture diff when no second capture
is at hand, and the yardstick (the FP8 noise floor) of every capture diff.

`run_capture` turns a `LayerRun` and the checkpoint it ran on into a `Capture` with the engine's
canonical names and sharding: each rank's weights (the checkpoint sharded by `parallel.sharding`),
each step's per-rank output (shard kind from the step record's gather rule), the inputs of the steps
the explanation recomputes (linears and norms) and the layer input and output. A reference capture
and an engine's capture then compare the same way, with one code path (`explain.diff`).

`reference_capture` runs the scenario "reference" (torch-reference kernel, correct layouts) at the
capture's TP size on the capture's own layer input and positions. `capture_floor` is the noise floor
of `verdict` for those inputs: per step, the error of the reference against the fp32 truth.
"""

from __future__ import annotations

import torch

from ..capture import Capture, CapturedTensor, CaptureManifest, EngineInfo, RankCapture, Shard, TensorRole
from ..model import Checkpoint
from ..model.records import CONCAT, PARTIAL
from ..parallel import run_layer
from ..parallel.sharding import COLUMN, ROW, linear_specs, norm_names
from ..verdict.floor import dense_twin, step_floor

REFERENCE_ENGINE = "mla_debug-reference"

# Which step's output (or which slice of it) a step consumes, for the V3 program: the inputs the
# explanation recomputes a step from. (name of the producing step, column slice by cfg or None).
_V3_INPUTS = {
    "q_a_layernorm": ("fused_qkv_a", "q_c"),
    "kv_a_layernorm": ("fused_qkv_a", "kv_c"),
    "q_b_proj": ("q_a_layernorm", None),
    "kv_b_proj": ("kv_a_layernorm", None),
}


def _sharding(parallel: str) -> tuple[Shard, int | None]:
    if parallel == COLUMN:
        return Shard.SPLIT, 0
    if parallel == ROW:
        return Shard.SPLIT, 1
    return Shard.REPLICATED, None


def _rank_weights(ckpt: Checkpoint, tp_size: int, rank: int) -> dict[str, CapturedTensor]:
    """The checkpoint's tensors this rank holds, under their Hugging Face short names."""
    found: dict[str, CapturedTensor] = {}
    for spec in linear_specs(ckpt.cfg):
        shard, dim = _sharding(spec.parallel)
        for module in spec.sources:
            for suffix, role in ((".weight", TensorRole.WEIGHT), (".weight_scale_inv", TensorRole.WEIGHT_SCALE)):
                name = module + suffix
                if name not in ckpt.tensors:
                    continue
                full = ckpt.tensors[name]
                part = full if shard is Shard.REPLICATED else full.chunk(tp_size, dim=dim)[rank]
                found[name] = CapturedTensor(name, role, part.contiguous(), shard=shard, shard_dim=dim)
    for norm in norm_names(ckpt.cfg):
        name = f"{norm}.weight"
        found[name] = CapturedTensor(name, TensorRole.WEIGHT, ckpt.tensors[name])
    return found


def _record_shard(record) -> tuple[Shard, int | None]:
    if record.gather == CONCAT:
        return Shard.SPLIT, record.gather_dim % record.output.dim()
    if record.gather == PARTIAL:
        return Shard.PARTIAL_SUM, None
    return Shard.REPLICATED, None


def _rank_steps(run, cfg, rank: int, hidden: torch.Tensor) -> dict[str, CapturedTensor]:
    records = {name: per_rank[rank] for name, per_rank in run.per_rank.items()}
    found: dict[str, CapturedTensor] = {
        "layer.input": CapturedTensor("layer.input", TensorRole.INPUT, hidden, step="fused_qkv_a"),
        "fused_qkv_a.input": CapturedTensor("fused_qkv_a.input", TensorRole.INPUT, hidden, step="fused_qkv_a"),
    }
    for name, record in records.items():
        if record.output is None or name == "all_reduce":
            continue
        shard, dim = _record_shard(record)
        out = f"{name}.output"
        found[out] = CapturedTensor(out, TensorRole.OUTPUT, record.output, step=name, shard=shard, shard_dim=dim)
    lq, lkv = cfg.q_lora_rank, cfg.kv_lora_rank
    columns = {"q_c": slice(0, lq), "kv_c": slice(lq, lq + lkv)}
    for step, (source, part) in _V3_INPUTS.items():
        if step not in records or source not in records:
            continue
        value = records[source].output
        value = value[:, columns[part]] if part else value
        name = f"{step}.input"
        found[name] = CapturedTensor(name, TensorRole.INPUT, value, step=step)
    if "fused_qkv_a" in records:
        # Engines that keep q_a and kv_a apart (transformers) record them as two ops of the step.
        fused = records["fused_qkv_a"].output
        for op, rows in (("q_a_proj", slice(0, lq)), ("kv_a_proj_with_mqa", slice(lq, None))):
            found[f"{op}.input"] = CapturedTensor(f"{op}.input", TensorRole.INPUT, hidden, step="fused_qkv_a")
            found[f"{op}.output"] = CapturedTensor(
                f"{op}.output", TensorRole.OUTPUT, fused[:, rows], step="fused_qkv_a"
            )
    if "attention" in records:
        # Per-head outputs flattened to (tokens, heads * width), as captures of any engine hold them.
        value = records["attention"].output
        found["attention.output"] = CapturedTensor(
            "attention.output",
            TensorRole.OUTPUT,
            value.reshape(value.shape[0], -1),
            step="attention",
            shard=Shard.SPLIT,
            shard_dim=1,
        )
    feeds_o_proj = "absorb_uv" if "absorb_uv" in records else "attention"
    if "o_proj" in records and feeds_o_proj in records:
        value = records[feeds_o_proj].output
        found["o_proj.input"] = CapturedTensor(
            "o_proj.input",
            TensorRole.INPUT,
            value.reshape(value.shape[0], -1),
            step="o_proj",
            shard=Shard.SPLIT,
            shard_dim=1,
        )
    if "all_reduce" in records:
        found["layer.output"] = CapturedTensor(
            "layer.output", TensorRole.OUTPUT, records["all_reduce"].output, step="o_proj"
        )
    return found


def run_capture(run, ckpt: Checkpoint, hidden: torch.Tensor, positions: torch.Tensor, note: str = "") -> Capture:
    """A `LayerRun` of `ckpt` on (`hidden`, `positions`) as a Capture (see the module docstring).

    Only V3 layers (the layers captures are taken of): a V4 run is refused with the reason.
    """
    cfg = ckpt.cfg
    if cfg.arch != "v3":
        raise ValueError(f"run_capture: {cfg.name} is a {cfg.arch} layer; captures hold DeepSeek-V3 (MLA v3) layers")
    if not run.per_rank:
        raise ValueError("run_capture: the run kept no per-rank records")
    ranks = []
    for rank in range(run.tp_size):
        tensors = _rank_weights(ckpt, run.tp_size, rank)
        tensors.update(_rank_steps(run, cfg, rank, hidden))
        ranks.append(RankCapture(rank, run.tp_size, tensors))
    manifest = CaptureManifest(
        engine=EngineInfo(REFERENCE_ENGINE, None),
        cfg=cfg,
        layer=ckpt.layer,
        tp_size=run.tp_size,
        positions=tuple(int(p) for p in positions),
        tokens=tuple(range(hidden.shape[0])),
        model_type="deepseek_v3",
        mode=run.mode,
        note=note or f"run_layer scenario {run.scenario} on {run.platform}",
    )
    return Capture(manifest, ranks)


def _mode(capture: Capture) -> str:
    return capture.manifest.mode or "prefill"


def _activation_dtype(capture: Capture) -> torch.dtype:
    hidden = capture.hidden
    return hidden.dtype if hidden.is_floating_point() and hidden.element_size() > 1 else torch.bfloat16


def reference_capture(capture: Capture, ckpt: Checkpoint, tp_size: int | None = None) -> Capture:
    """mla_debug's reference run of `ckpt` on the capture's layer input and positions, at `tp_size`
    (default: the capture's) in the capture's mode and activation dtype, as a Capture."""
    tp = capture.tp_size if tp_size is None else tp_size
    hidden, positions = capture.hidden, capture.positions
    dtype = _activation_dtype(capture)
    run = run_layer(ckpt.cfg, ckpt, hidden, positions, tp_size=tp, mode=_mode(capture), dtype=dtype)
    return run_capture(run, ckpt, hidden.to(dtype), positions, note="mla_debug reference run (scenario reference)")


def capture_floor(capture: Capture, ckpt: Checkpoint, tp_sizes: tuple[int, ...] | None = None) -> dict[str, float]:
    """The FP8 noise floor per step (`verdict.step_floor`) on the capture's inputs: the reference
    run against the fp32 truth of the checkpoint's dequantized weights (one truth run, TP1), at each of
    `tp_sizes` (default: the capture's), the largest per step."""
    hidden, positions, mode = capture.hidden, capture.positions, _mode(capture)
    dense = dense_twin(ckpt)
    truth = run_layer(dense.cfg, dense, hidden, positions, tp_size=1, mode=mode, dtype=torch.float32)
    del dense
    floors = []
    for tp in tp_sizes or (capture.tp_size,):
        reference = run_layer(
            ckpt.cfg, ckpt, hidden, positions, tp_size=tp, mode=mode, dtype=_activation_dtype(capture)
        )
        floors.append(step_floor(reference, truth))
        del reference
    return {step: max(f.get(step, 0.0) for f in floors) for step in floors[0]}
