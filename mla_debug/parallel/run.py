"""Entry points: `MLALayer` (step through one layer op by op) and `run_layer` (collect a LayerRun)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .._checks import describe, require_tensor
from ..kernels import KernelChoice, Platform
from ..kernels import platform as platform_of
from ..model.records import StepRecord
from ..scenarios import Scenario
from ..scenarios import scenario as scenario_of
from .build import LayerBuilder
from .distributed import describe_kernel, run_ranks_distributed
from .gather import gather_step
from .layer_run import LayerRun
from .simulated import run_lockstep

MODES = ("prefill", "decode")
EXECUTORS = ("simulated", "distributed")


def check_inputs(cfg, ckpt, hidden: torch.Tensor, positions: torch.Tensor, mode: str) -> torch.Tensor:
    """Validate a layer call; returns positions as int64."""
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
    return positions.to(torch.int64)


class MLALayer:
    """One attention layer at one TP size, platform and scenario, built once and run many times.

    >>> layer = md.MLALayer(cfg, ckpt, tp_size=4, platform="mi355x", scenario="vllm-pr51692")
    >>> for record in layer.steps(hidden, positions, mode="decode"):
    ...     print(record.summary())
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
        self.device = torch.device(device)
        ckpt = ckpt.to(self.device)
        self.cfg, self.ckpt, self.tp_size, self.dtype = cfg, ckpt, tp_size, dtype
        self.platform = platform_of(platform)
        self.scenario = scenario_of(scenario)
        self.builder = LayerBuilder(cfg, ckpt, tp_size, self.platform, self.scenario, dtype, policy)
        self.ranks = self.builder.rank_layers()
        self.last_per_rank: dict[str, list[StepRecord]] = {}

    @property
    def kernels(self) -> dict[str, KernelChoice]:
        """Linear name -> the kernel chosen for it on rank 0 and why."""
        return {name: describe_kernel(linear) for name, linear in self.ranks[0].linears.items()}

    @property
    def events(self) -> dict[str, list[str]]:
        return {name: list(linear.events) for name, linear in self.ranks[0].linears.items()}

    def steps(self, hidden: torch.Tensor, positions: torch.Tensor, mode: str = "prefill") -> Iterator[StepRecord]:
        """Yield the gathered StepRecord of every op in order; per-rank records land in `last_per_rank`."""
        positions = check_inputs(self.cfg, self.ckpt, hidden, positions, mode).to(self.device)
        hidden = hidden.to(self.device)
        self.last_per_rank = {}
        for name, records in run_lockstep(self.ranks, hidden, positions, mode):
            self.last_per_rank[name] = records
            yield gather_step(records)

    def run(
        self, hidden: torch.Tensor, positions: torch.Tensor, mode: str = "prefill", record: bool = True
    ) -> LayerRun:
        """All steps into a LayerRun; `record=False` keeps only the final output (no per-step or per-rank records)."""
        if record:
            records = {r.name: r for r in self.steps(hidden, positions, mode)}
            return self._layer_run(records, dict(self.last_per_rank), mode, "simulated")
        positions = check_inputs(self.cfg, self.ckpt, hidden, positions, mode).to(self.device)
        last = None
        for _, records in run_lockstep(self.ranks, hidden.to(self.device), positions, mode):
            last = records
        final = gather_step(last)
        return self._layer_run({final.name: final}, {}, mode, "simulated")

    def _layer_run(self, records, per_rank, mode: str, executor: str) -> LayerRun:
        return LayerRun(
            model=self.cfg.name,
            tp_size=self.tp_size,
            mode=mode,
            platform=self.platform.name,
            scenario=self.scenario.name,
            executor=executor,
            records=records,
            per_rank=per_rank,
            kernels=self.kernels,
            events=self.events,
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
    profile_dir: str | None = None,
) -> LayerRun:
    """Run one layer forward at `tp_size` and collect every step (gathered to TP-independent shapes).

    executor="simulated" runs all ranks in this process; "distributed" runs one process per rank with
    torch.distributed and gives a bitwise identical LayerRun. device="cuda" runs on the GPU: all
    in-process ranks share one, and the distributed executor gives each rank its own (nccl).
    profile_dir (distributed executor only; `md.profile` sets it) makes every rank profile itself and
    write ``rank<r>.<ns>.pt.trace.json.gz`` into that folder.
    """
    check_device(device)
    if executor not in EXECUTORS:
        raise ValueError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    if executor == "simulated":
        if profile_dir is not None:
            raise ValueError("profile_dir is for executor='distributed'; profile an in-process run with md.profile")
        return MLALayer(cfg, ckpt, tp_size, platform, scenario, dtype, device=device).run(hidden, positions, mode)
    if device == "cuda" and torch.cuda.device_count() < tp_size:
        raise ValueError(
            f"the distributed executor needs one GPU per rank: {tp_size} ranks, {torch.cuda.device_count()} GPUs"
        )
    cfg.check_tp(tp_size)
    positions = check_inputs(cfg, ckpt, hidden, positions, mode)
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
        profile_dir=None if profile_dir is None else str(profile_dir),
    )
    report = run_ranks_distributed(payload, tp_size, timeout=timeout)
    per_rank_lists = report["records"]
    names = [record.name for record in per_rank_lists[0]]
    per_rank = {name: [ranks[i] for ranks in per_rank_lists] for i, name in enumerate(names)}
    records = {name: gather_step(per_rank[name]) for name in names}
    return LayerRun(
        model=cfg.name,
        tp_size=tp_size,
        mode=mode,
        platform=plat.name,
        scenario=scen.name,
        executor="distributed",
        records=records,
        per_rank=per_rank,
        kernels=report["kernels"],
        events=report["events"],
    )
