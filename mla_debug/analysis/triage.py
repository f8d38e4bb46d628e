"""TP triage: run a layer at every TP size and mode under a scenario, compare each step with the
reference, and find the smallest change that restores every diverged configuration.

Verdicts come from running the mechanics - the emulated kernels reading bytes in their own order - and
comparing numbers; nothing is looked up in a table of known answers.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..model import Checkpoint, MLAConfig
from ..parallel import MLALayer, check_device
from ..scenarios import Scenario
from ..scenarios import scenario as scenario_of
from .changes import Change, candidate_changes, explain
from .diff import RunDiff, compare
from .noise import DIVERGENCE_FACTOR, dense_twin, step_floor

MODES = ("prefill", "decode")


class Workbench:
    """Everything a triage reuses across scenarios: config, checkpoint, inputs, the fp32 truth and the
    reference runs per (TP size, mode). Build one and pass it to several `triage` calls."""

    def __init__(
        self,
        model: str | MLAConfig = "deepseek-v3",
        platform="mi355x",
        tokens: int = 16,
        seed: int = 0,
        checkpoint: Checkpoint | str | Path | None = None,
        layer: int = 0,
        progress=None,
        device: str | None = None,
    ) -> None:
        from ..kernels import platform as platform_of

        if tokens < 1:
            raise ValueError(f"tokens={tokens} must be >= 1")
        self.platform = platform_of(platform)
        self.device = workbench_device(device, self.platform)
        if checkpoint is None:
            self.cfg = model if isinstance(model, MLAConfig) else MLAConfig.preset(model)
            self.ckpt = Checkpoint.synthetic(self.cfg, seed=seed, progress=progress)
        else:
            self.ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint.load(checkpoint, layer=layer)
            self.cfg = self.ckpt.cfg
        self.ckpt = self.ckpt.to(self.device)  # once, not per layer built
        self.tokens, self.seed = tokens, seed
        gen = torch.Generator().manual_seed(seed)
        self.hidden = torch.randn(tokens, self.cfg.hidden_size, generator=gen).to(torch.bfloat16)
        self.positions = torch.arange(tokens)
        self._truth: dict[str, object] = {}
        self._reference: dict[tuple[int, str], object] = {}
        self._dense: Checkpoint | None = None

    def truth(self, mode: str):
        if mode not in self._truth:
            if self._dense is None:
                self._dense = dense_twin(self.ckpt)
            layer = MLALayer(self.cfg, self._dense, 1, self.platform, "reference", torch.float32, device=self.device)
            self._truth[mode] = layer.run(self.hidden, self.positions, mode)
        return self._truth[mode]

    def reference(self, tp: int, mode: str):
        if (tp, mode) not in self._reference:
            layer = MLALayer(self.cfg, self.ckpt, tp, self.platform, "reference", device=self.device)
            self._reference[(tp, mode)] = layer.run(self.hidden, self.positions, mode)
        return self._reference[(tp, mode)]

    def floor(self, tp: int, mode: str) -> dict[str, float]:
        return step_floor(self.reference(tp, mode), self.truth(mode))

    def run(self, scen: Scenario, tp: int, mode: str):
        layer = MLALayer(self.cfg, self.ckpt, tp, self.platform, scen, device=self.device)
        return layer.run(self.hidden, self.positions, mode)

    def diff(self, scen: Scenario, tp: int, mode: str, factor: float = DIVERGENCE_FACTOR) -> RunDiff:
        return compare(self.run(scen, tp, mode), self.reference(tp, mode), self.floor(tp, mode), factor)


def workbench_device(device: str | None, plat) -> torch.device:
    """Where a triage computes: `device` as given, or by default the GPU when the platform is an NVIDIA one
    and torch sees a CUDA GPU (the Triton/cuBLAS kernels then run for real), else the CPU."""
    if device is None:
        device = "cuda" if plat.is_cuda and torch.cuda.is_available() else "cpu"
    return check_device(device)


@dataclass
class ConfigResult:
    tp: int
    mode: str
    diff: RunDiff

    @property
    def run(self):
        return self.diff.run

    @property
    def verdict(self) -> str:
        return "diverged" if self.diff.diverged else "ok"


@dataclass
class Culprit:
    tp: int
    mode: str
    step: str
    layer: str
    change: str
    explanation: str
    changes: list[Change] = field(default_factory=list)


@dataclass
class TriageResult:
    model: str
    platform: str
    scenario: str
    tokens: int
    seed: int
    tp_sizes: tuple[int, ...]
    modes: tuple[str, ...]
    configs: list[ConfigResult]
    culprits: list[Culprit]
    elapsed_s: float = 0.0
    unresolved: list[tuple[int, str]] = field(default_factory=list)
    device: str = "cpu"

    def config(self, tp: int, mode: str) -> ConfigResult:
        for c in self.configs:
            if c.tp == tp and c.mode == mode:
                return c
        raise KeyError(f"no run at TP{tp} {mode}; have {[(c.tp, c.mode) for c in self.configs]}")

    @property
    def summary(self):
        """pandas DataFrame: one row per (TP size, mode)."""
        import pandas as pd

        rows = []
        for c in self.configs:
            worst = c.diff.worst
            kinds = sorted({str(v.kind) for s in c.diff.steps for v in s.effective_violations})
            rows.append(
                dict(
                    tp=c.tp,
                    mode=c.mode,
                    verdict=c.verdict,
                    first_divergent_step=c.diff.first_divergent_step,
                    worst_step=worst.name if worst else None,
                    worst_rel_err=worst.rel_err if worst else None,
                    violations=", ".join(kinds),
                )
            )
        return pd.DataFrame(rows)

    def step_table(self, tp: int, mode: str):
        return self.config(tp, mode).diff.table

    def error_matrix(self, mode: str):
        """pandas DataFrame of relative error: rows TP sizes, columns steps (in order)."""
        import pandas as pd

        rows = {c.tp: {s.name: s.rel_err for s in c.diff.steps} for c in self.configs if c.mode == mode}
        return pd.DataFrame.from_dict(rows, orient="index")

    def default_step(self, tp: int, mode: str) -> str:
        """The step worth opening first: the first divergent one, else the worst."""
        diff = self.config(tp, mode).diff
        return diff.first_divergent_step or diff.worst.name

    def block_errors(self, tp: int, mode: str, step: str | None = None) -> torch.Tensor:
        """(tokens, 128-column blocks) relative error of `step` (default: `default_step`)."""
        from .diff import block_errors

        c = self.config(tp, mode)
        name = step or self.default_step(tp, mode)
        return block_errors(c.diff.run.records[name].output, c.diff.reference.records[name].output)

    def to_dict(self) -> dict:
        """The documented JSON schema (see `analysis.report_json`)."""
        from .report_json import triage_to_dict

        return triage_to_dict(self)

    def to_json(self, path) -> Path:
        from .report_json import write_json

        return write_json(self, path)

    def to_html(self, path) -> Path:
        from ..viz.report import write_html

        return write_html(self, path)


def _progress(total: int, enabled: bool | None, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled if enabled is not None else None, leave=False)


def bisect(
    bench: Workbench, scen: Scenario | str, tp: int, mode: str, max_changes: int = 3, factor: float = DIVERGENCE_FACTOR
) -> Culprit | None:
    """The smallest set of single changes that restores (tp, mode) under `scen`, as a Culprit."""
    scen = scenario_of(scen)
    failing = bench.diff(scen, tp, mode, factor)
    if not failing.diverged:
        return None
    changes = candidate_changes(scen, failing.run.kernels, bench.cfg)
    for size in range(1, max_changes + 1):
        restoring = []
        for combo in itertools.combinations(changes, size):
            trial = scen
            for change in combo:
                trial = change.apply(trial)
            if not bench.diff(trial, tp, mode, factor).diverged:
                restoring.append(combo)
        if restoring:
            # Prefer model-side fixes and honoured flags (what a serving engine would change) over
            # swapping a kernel out; among equals keep the order of the layer's steps.
            best = min(restoring, key=lambda combo: sum(c.kind == "kernel-to-reference" for c in combo))
            first = failing.first_divergent
            layer = _layer_of(first.name, best, failing)
            violations = [v for s in failing.steps for v in s.effective_violations]
            at_first = first.effective_violations or violations[:1]
            return Culprit(
                tp=tp,
                mode=mode,
                step=first.name,
                layer=layer,
                change="; ".join(c.description for c in best),
                explanation=explain(layer, tp, mode, at_first, list(best)),
                changes=list(best),
            )
    return None


def _layer_of(step: str, combo: tuple[Change, ...], diff: RunDiff) -> str:
    """The layer a culprit is about: the swapped kernel's layer, else the first effective violation's."""
    for change in combo:
        if change.kind == "kernel-to-reference":
            return change.target
    for s in diff.steps:
        for v in s.effective_violations:
            return v.tensor.split(" ")[0].removesuffix(".weight")
    return step


def triage(
    model: str | MLAConfig = "deepseek-v3",
    platform="mi355x",
    scenario: Scenario | str = "vllm-pr51692",
    tp_sizes=(1, 2, 4, 8),
    tokens: int | None = None,
    modes=MODES,
    seed: int = 0,
    checkpoint=None,
    bench: Workbench | None = None,
    find_culprits: bool = True,
    factor: float = DIVERGENCE_FACTOR,
    progress: bool | None = None,
    device: str | None = None,
) -> TriageResult:
    """Run the layer at every TP size and mode under `scenario`; see TriageResult.

    Pass a `Workbench` to reuse its checkpoint, inputs, truth and reference runs across scenarios
    (tokens default to 16 without one). Needs only the CPU; `device` ("cpu" or "cuda") defaults to the GPU
    for an NVIDIA platform when one is visible (see `workbench_device`).

    >>> result = md.triage("deepseek-v3", "mi355x", "vllm-pr51692", tp_sizes=(1, 2, 4, 8))
    >>> result.summary; result.culprits[0].explanation
    """
    start = time.perf_counter()
    scen = scenario_of(scenario)
    if bench is None:
        bench = Workbench(model, platform, 16 if tokens is None else tokens, seed, checkpoint, device=device)
    elif tokens is not None and tokens != bench.tokens:
        raise ValueError(f"tokens={tokens} differs from the workbench's {bench.tokens}; build another Workbench")
    elif device is not None and torch.device(device).type != bench.device.type:
        raise ValueError(f"device={device!r} differs from the workbench's {bench.device}; build another Workbench")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    for tp in tp_sizes:
        bench.cfg.check_tp(tp)
    configs = []
    with _progress(len(tp_sizes) * len(modes), progress, f"triage {bench.cfg.name} {scen.name}") as bar:
        for tp in tp_sizes:
            for mode in modes:
                configs.append(ConfigResult(tp, mode, bench.diff(scen, tp, mode, factor)))
                bar.update()
    culprits, unresolved = [], []
    if find_culprits:
        for c in configs:
            if c.verdict == "diverged":
                culprit = bisect(bench, scen, c.tp, c.mode, factor=factor)
                if culprit:
                    culprits.append(culprit)
                else:
                    unresolved.append((c.tp, c.mode))
    return TriageResult(
        model=bench.cfg.name,
        platform=bench.platform.name,
        scenario=scen.name,
        tokens=bench.tokens,
        seed=bench.seed,
        tp_sizes=tuple(tp_sizes),
        modes=tuple(modes),
        configs=configs,
        culprits=culprits,
        elapsed_s=time.perf_counter() - start,
        unresolved=unresolved,
        device=bench.device.type,
    )
