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
`truth_capture` is that truth (the checkpoint dequantized, fp32, TP1) as a Capture: what a diff of two
captures whose layer inputs differ propagates the difference through.

Every run sees the keys the capture's rows attended to (`reference_inputs`): the kept rows after the
rows of ``context.input`` (the call's rows left out and a KV cache's earlier rows, capture.context), and
keeps the kept rows' outputs. When the capture lacks some of those keys, or its rows mix sequences, the
steps from attention on cannot be computed for it (`KEYED_STEPS`, with the `Untestable` reason). The
program run is the one the engine ran (`program`): the naive one wherever kv_b_proj ran on the call's
rows (a prefill, or transformers' decode), the absorbed one for a decode call without it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..capture import Capture, CapturedTensor, CaptureManifest, EngineInfo, RankCapture, Shard, TensorRole
from ..capture.context import CONTEXT_INPUT, CONTEXT_POSITIONS
from ..model import Checkpoint
from ..model.records import CONCAT, PARTIAL
from ..parallel import run_layer
from ..parallel.sharding import COLUMN, ROW, linear_specs, norm_names
from ..verdict.floor import dense_twin, step_floor
from .untestable import Untestable

REFERENCE_ENGINE = "mla_debug-reference"
TRUTH_ENGINE = "mla_debug-truth"
# mla_debug steps whose output for a row depends on other rows' keys, and the capture names of their outputs.
KEYED_STEPS = ("attention", "absorb_uv", "o_proj", "all_reduce")
KEYED_OUTPUTS = ("attention.output", "absorb_uv.output", "o_proj.output", "layer.output")


@dataclass(frozen=True)
class ReferenceInputs:
    """What a reference run of a capture is given: the context rows, then the kept rows (the last `kept`
    of `hidden`), with their positions; `untestable` says why the kept rows' keys are not all there
    (None: they are), `missing` the key positions the capture lacks."""

    hidden: torch.Tensor
    positions: torch.Tensor
    kept: int
    untestable: Untestable | None = None
    missing: tuple[int, ...] = ()


def _context(capture: Capture) -> tuple[torch.Tensor | None, list[int]]:
    if CONTEXT_INPUT not in capture.ranks[0].tensors:
        return None, []
    return capture.gathered(CONTEXT_INPUT), capture.gathered(CONTEXT_POSITIONS).tolist()


def reference_inputs(capture: Capture) -> ReferenceInputs:
    """The capture's kept rows and the context rows their keys come from (see the module docstring).

    The keys a kept row needs are the manifest's `key_positions`; a capture that does not record them is
    taken at its word when it says prefill (its rows are the call's) and read as needing every earlier
    position otherwise (a decode call reads them from its cache)."""
    hidden, kept = capture.hidden, list(capture.manifest.positions)
    rows, positions = _context(capture)
    wanted = capture.manifest.key_positions
    untestable, missing = None, ()
    if wanted is None:
        if capture.manifest.mode == "prefill":
            wanted = sorted(set(kept) | {p for p in positions if p <= max(kept, default=-1)})
        else:
            wanted = list(range(max(kept, default=-1) + 1))
            if capture.manifest.mode is None and not set(wanted) <= set(kept) | set(positions):
                untestable = Untestable.KV_CONTEXT_UNKNOWN
    available = kept + [p for p in positions if p in set(wanted)]
    if len(set(available)) != len(available):
        untestable = Untestable.MULTIPLE_SEQUENCES
    elif untestable is None:
        missing = tuple(sorted(set(wanted) - set(available)))
        untestable = Untestable.KV_CONTEXT_MISSING if missing else None
    if rows is None or untestable is not None:
        return ReferenceInputs(hidden, capture.positions, len(kept), untestable, missing)
    use = [i for i, p in enumerate(positions) if p in set(wanted)]
    both = torch.cat([rows[use].to(hidden.dtype), hidden])
    at = torch.tensor([positions[i] for i in use] + kept, dtype=torch.long)
    return ReferenceInputs(both, at, len(kept))


def program(capture: Capture) -> str:
    """The mode of the program the engine ran: "prefill" (naive) wherever kv_b_proj ran on the call's rows,
    else the capture's mode (default prefill)."""
    if "kv_b_proj.output" in capture.ranks[0].tensors:
        return "prefill"
    return capture.manifest.mode or "prefill"


def _kept_rows(run, kept: int):
    """The run with every record's output cut to its last `kept` rows (the capture's own)."""

    def cut(record):
        if record.output is None or record.output.shape[0] == kept:
            return record
        return replace(record, output=record.output[-kept:], _stats=None)

    return replace(
        run,
        records={n: cut(r) for n, r in run.records.items()},
        per_rank={n: [cut(r) for r in rs] for n, rs in run.per_rank.items()},
    )

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
    attention = "absorb_uv" if "absorb_uv" in records else "attention"
    if attention in records:
        # Per-head outputs flattened to (tokens, heads * width), as captures of any engine hold them; an
        # engine's attention op returns V-space rows, after W_UV in the absorbed program. o_proj reads them.
        value = records[attention].output
        heads = value.reshape(value.shape[0], -1)
        found["attention.output"] = CapturedTensor(
            "attention.output", TensorRole.OUTPUT, heads, step="attention", shard=Shard.SPLIT, shard_dim=1
        )
        if "o_proj" in records:
            found["o_proj.input"] = CapturedTensor(
                "o_proj.input", TensorRole.INPUT, heads, step="o_proj", shard=Shard.SPLIT, shard_dim=1
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


def _activation_dtype(capture: Capture) -> torch.dtype:
    hidden = capture.hidden
    return hidden.dtype if hidden.is_floating_point() and hidden.element_size() > 1 else torch.bfloat16


def _run(ckpt: Checkpoint, inputs: ReferenceInputs, tp: int, mode: str, dtype: torch.dtype):
    run = run_layer(ckpt.cfg, ckpt, inputs.hidden.to(dtype), inputs.positions, tp_size=tp, mode=mode, dtype=dtype)
    return _kept_rows(run, inputs.kept)


def reference_capture(capture: Capture, ckpt: Checkpoint, tp_size: int | None = None) -> Capture:
    """mla_debug's reference run of `ckpt` on the capture's layer input and positions (after the context
    rows its keys come from), at `tp_size` (default: the capture's) in the engine's program and the
    capture's activation dtype, as a Capture of the kept rows."""
    tp = capture.tp_size if tp_size is None else tp_size
    inputs, dtype = reference_inputs(capture), _activation_dtype(capture)
    run = _run(ckpt, inputs, tp, program(capture), dtype)
    found = run_capture(run, ckpt, capture.hidden.to(dtype), capture.positions, note="mla_debug reference run (scenario reference)")
    return _same_call(found, capture)


def _same_call(found: Capture, capture: Capture) -> Capture:
    """A run of the capture's call as a capture of that call: its mode, key positions and context rows."""
    manifest = replace(found.manifest, mode=capture.manifest.mode, key_positions=capture.manifest.key_positions)
    context = {n: capture.ranks[0].tensors[n] for n in (CONTEXT_INPUT, CONTEXT_POSITIONS) if n in capture.ranks[0].tensors}
    ranks = [RankCapture(r.rank, r.tp_size, {**r.tensors, **context}) for r in found.ranks]
    return Capture(manifest, ranks)


def truth_run(capture: Capture, dense: Checkpoint):
    """The fp32 truth run (TP1, unquantized activations) of `dense` - a checkpoint's dequantized twin,
    `verdict.dense_twin` - on the capture's inputs, cut to the kept rows."""
    return _run(dense, reference_inputs(capture), 1, program(capture), torch.float32)


def truth_capture(capture: Capture, ckpt: Checkpoint, dense: Checkpoint | None = None, run=None) -> Capture:
    """The fp32 truth (the checkpoint dequantized, unquantized activations, TP1) on the capture's inputs,
    as a Capture of the kept rows; `dense` / `run` reuse a dequantized twin or a truth run made already."""
    dense = dense_twin(ckpt) if dense is None else dense
    run = truth_run(capture, dense) if run is None else run
    truth = _same_call(run_capture(run, dense, capture.hidden.to(torch.float32), capture.positions, note="fp32 truth"), capture)
    return Capture(replace(truth.manifest, engine=EngineInfo(TRUTH_ENGINE, None)), truth.ranks)


def capture_floor(
    capture: Capture, ckpt: Checkpoint, tp_sizes: tuple[int, ...] | None = None, truth=None
) -> dict[str, float]:
    """The FP8 noise floor per step (`verdict.step_floor`) on the capture's inputs: the reference
    run against the fp32 truth of the checkpoint's dequantized weights (one truth run, TP1; `truth`
    when made already, `truth_run`), at each of `tp_sizes` (default: the capture's), the largest per step."""
    inputs, mode = reference_inputs(capture), program(capture)
    if truth is None:
        dense = dense_twin(ckpt)
        truth = _run(dense, inputs, 1, mode, torch.float32)
        del dense
    floors = []
    for tp in tp_sizes or (capture.tp_size,):
        reference = _run(ckpt, inputs, tp, mode, _activation_dtype(capture))
        floors.append(step_floor(reference, truth))
        del reference
    return {step: max(f.get(step, 0.0) for f in floors) for step in floors[0]}
