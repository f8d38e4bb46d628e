"""Entry points: `MLALayer` (step through one layer op by op) and `run_layer` (collect a LayerRun).

Each call validates its options once (TP size, inputs, device, hooks) and then drives the one step
loop (`parallel.loop`) through an executor; the LayerRun is assembled in one place (`assemble_run`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .._checks import describe, require_tensor
from ..kernels import KernelChoice, Platform
from ..kernels import platform as platform_of
from ..model.indexer import warn_if_inexact
from ..model.records import StepRecord
from ..scenarios import Scenario
from ..scenarios import scenario as scenario_of
from .build import LayerBuilder
from .distributed import run_ranks_distributed
from .gather import gather_step
from .hooks import Hooks, HookTable, hook_table, require_picklable
from .layer_run import LayerRun, assemble_run, events_of, kernels_of
from .observe import step_observers
from .patch import Patch
from .simulated import run_lockstep

MODES = ("prefill", "decode")
EXECUTORS = ("simulated", "distributed")


def check_inputs(cfg, ckpt, hidden: torch.Tensor, positions: torch.Tensor, mode: str) -> torch.Tensor:
    """Validate a layer call; returns positions as int64. Warns (`model.indexer.SparseAttentionWarning`)
    when a DeepSeek-V3.2 layer gets more tokens than its indexer keeps: the run is made, densely."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    mismatched = [
        key
        for key, value in cfg.to_dict().items()
        if key not in ("name", "quantized") and ckpt.cfg.to_dict()[key] != value
    ]
    if mismatched:
        raise ValueError(f"checkpoint config {ckpt.cfg.name!r} differs from {cfg.name!r} in {mismatched}")
    require_tensor("hidden", hidden)
    if hidden.dim() != 2 or hidden.shape[1] != cfg.hidden_size:
        raise ValueError(f"hidden: {describe(hidden)} must be (tokens, hidden_size={cfg.hidden_size})")
    if not hidden.is_floating_point() or hidden.element_size() == 1:
        raise TypeError(f"hidden: {describe(hidden)} must be a float16/bfloat16/float32 tensor")
    require_tensor("positions", positions)
    if positions.dim() != 1 or positions.shape[0] != hidden.shape[0]:
        raise ValueError(
            f"positions: {describe(positions)} must be 1-D with one position per token ({hidden.shape[0]})"
        )
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise TypeError(f"positions: {describe(positions)} must hold integers")
    if positions.numel() and (positions.min() < 0 or positions.max() >= cfg.max_position_embeddings):
        raise ValueError(
            f"positions: values {int(positions.min())}..{int(positions.max())} are outside "
            f"0..{cfg.max_position_embeddings - 1} (max_position_embeddings of {cfg.name})"
        )
    warn_if_inexact(cfg, hidden.shape[0], stacklevel=3)
    return positions.to(torch.int64)


class MLALayer:
    """One attention layer at one TP size, platform and scenario, built once and run many times.

    >>> layer = md.MLALayer(cfg, ckpt, tp_size=4, platform="mi355x", scenario="vllm-pr51692")
    >>> for record in layer.steps(hidden, positions, mode="decode"):
    ...     print(record.summary())

    `run` and `steps` take `hooks` (``{step name: fn(record, state)}``, see `parallel.hooks`) and
    `patch` (an `md.Patch`: a reference run's outputs substituted at chosen steps).
    """

    def __init__(
        self,
        cfg,
        ckpt,
        tp_size: int = 1,
        platform: Platform | str = "cpu",
        scenario: Scenario | str = "reference",
        dtype: torch.dtype = torch.bfloat16,
        policy=None,
        device: torch.device | str = "cpu",
    ) -> None:
        cfg.check_tp(tp_size)
        self.device = torch.device(device)
        ckpt = ckpt.to(self.device)
        self.cfg, self.ckpt, self.tp_size, self.dtype = cfg, ckpt, tp_size, dtype
        self.platform = platform_of(platform)
        self.scenario = scenario_of(scenario)
        self.builder = LayerBuilder(cfg, ckpt, tp_size, self.platform, self.scenario, dtype, policy)
        self.ranks = self.builder.rank_layers()
        self.last_per_rank: dict[str, list[StepRecord]] = {}
        self.last_run: LayerRun | None = None

    @property
    def kernels(self) -> dict[str, KernelChoice]:
        """Linear name -> the kernel chosen for it on rank 0 and why."""
        return kernels_of(self.ranks[0])

    @property
    def events(self) -> dict[str, list[str]]:
        return events_of(self.ranks[0])

    def steps(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        mode: str = "prefill",
        hooks: Hooks | None = None,
        patch: Patch | None = None,
    ) -> Iterator[StepRecord]:
        """Yield the gathered StepRecord of every op in order; per-rank records land in `last_per_rank`,
        and once the last op has run, the whole run in `last_run`. Inputs are checked at the call."""
        positions = check_inputs(self.cfg, self.ckpt, hidden, positions, mode)
        table = hook_table(hooks, patch, self.tp_size)
        return self._stepping(hidden, positions, mode, table)

    def _stepping(self, hidden, positions, mode: str, table: HookTable) -> Iterator[StepRecord]:
        self.last_per_rank, self.last_run = {}, None
        records = {}
        for name, per_rank in self._execute(hidden, positions, mode, table):
            self.last_per_rank[name] = per_rank
            records[name] = gather_step(per_rank)
            yield records[name]
        self.last_run = self._assemble(records, dict(self.last_per_rank), mode)

    def run(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        mode: str = "prefill",
        record: bool = True,
        hooks: Hooks | None = None,
        patch: Patch | None = None,
    ) -> LayerRun:
        """All steps into a LayerRun; `record=False` keeps only the final output (no per-step or per-rank records)."""
        positions = check_inputs(self.cfg, self.ckpt, hidden, positions, mode)
        return self._run(hidden, positions, mode, record, hook_table(hooks, patch, self.tp_size))

    def _run(self, hidden, positions, mode: str, record: bool, table: HookTable) -> LayerRun:
        """`run` on inputs already checked."""
        if record:
            for _ in self._stepping(hidden, positions, mode, table):
                pass
            return self.last_run
        last = None
        for _, per_rank in self._execute(hidden, positions, mode, table):
            last = per_rank
        final = gather_step(last)
        return self._assemble({final.name: final}, {}, mode)

    def _execute(self, hidden, positions, mode: str, table: HookTable):
        return run_lockstep(
            self.ranks, hidden.to(self.device), positions.to(self.device), mode, table, step_observers("simulated")
        )

    def _assemble(self, records, per_rank, mode: str) -> LayerRun:
        return assemble_run(
            self.cfg,
            self.tp_size,
            mode,
            self.platform.name,
            self.scenario.name,
            "simulated",
            records,
            per_rank,
            self.kernels,
            self.events,
        )


def check_device(device: str) -> torch.device:
    """`device` ("cpu" or "cuda") as a torch.device; a clear error for anything else or a missing GPU."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r} is not 'cpu' or 'cuda'")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' asked for, but torch sees no CUDA GPU")
    return torch.device(device)


def run_layer(
    cfg,
    ckpt,
    hidden: torch.Tensor,
    positions: torch.Tensor,
    tp_size: int = 1,
    mode: str = "prefill",
    platform: Platform | str = "cpu",
    scenario: Scenario | str = "reference",
    executor: str = "simulated",
    dtype: torch.dtype = torch.bfloat16,
    timeout: float = 300.0,
    device: str = "cpu",
    hooks: Hooks | None = None,
    patch: Patch | None = None,
) -> LayerRun:
    """Run one layer forward at `tp_size` and collect every step (gathered to TP-independent shapes).

    executor="simulated" runs all ranks in this process; "distributed" runs one process per rank with
    torch.distributed and gives a bitwise identical LayerRun. device="cuda" runs on the GPU: all
    in-process ranks share one, and the distributed executor gives each rank its own (nccl).

    hooks ``{step: fn(record, state)}`` run after a step on every rank and may return a replacement
    output (`parallel.hooks`); patch=md.Patch(reference_run, steps) substitutes a reference run's
    outputs at those steps (activation patching, `parallel.patch`). For the distributed executor both
    must be picklable. Under `md.profile` the ranges and per-rank traces come from the profiler's step
    observers (`parallel.observe`); the finished run announces itself to it.

    >>> reference = md.run_layer(cfg, ckpt, hidden, positions, tp_size=4, mode="decode")
    >>> patched = md.run_layer(cfg, ckpt, hidden, positions, tp_size=4, mode="decode",
    ...                        scenario="vllm-pr51692", patch=md.Patch(reference, ["absorb_uk"]))
    """
    check_device(device)
    if executor not in EXECUTORS:
        raise ValueError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    positions = check_inputs(cfg, ckpt, hidden, positions, mode)
    table = hook_table(hooks, patch, tp_size)
    if executor == "simulated":
        # MLALayer checks the TP size before it builds anything.
        layer = MLALayer(cfg, ckpt, tp_size, platform, scenario, dtype, device=device)
        return layer._run(hidden, positions, mode, True, table)
    cfg.check_tp(tp_size)
    if device == "cuda" and torch.cuda.device_count() < tp_size:
        raise ValueError(
            f"the distributed executor needs one GPU per rank: {tp_size} ranks, {torch.cuda.device_count()} GPUs"
        )
    require_picklable(table)
    plat, scen = platform_of(platform), scenario_of(scenario)
    payload = dict(
        cfg=cfg,
        ckpt=ckpt,
        hidden=hidden,
        positions=positions,
        mode=mode,
        platform=plat,
        scenario=scen,
        dtype=dtype,
        device=device,
        hooks=table,
        observers=step_observers("distributed"),
    )
    report = run_ranks_distributed(payload, tp_size, timeout=timeout)
    per_rank_lists = report["records"]
    names = [record.name for record in per_rank_lists[0]]
    per_rank = {name: [ranks[i] for ranks in per_rank_lists] for i, name in enumerate(names)}
    records = {name: gather_step(per_rank[name]) for name in names}
    return assemble_run(
        cfg, tp_size, mode, plat.name, scen.name, "distributed", records, per_rank, report["kernels"], report["events"]
    )
