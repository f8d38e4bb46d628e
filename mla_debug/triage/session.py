"""TP triage: run a layer at every TP size and mode under a scenario, compare each step with the
reference, and find the smallest changes that restore every diverged configuration (`bisection`).

Verdicts come from running the mechanics - the emulated kernels reading bytes in their own order - and
comparing numbers; nothing is looked up in a table of known answers.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .._checks import find
from ..kernels import TunedTable
from ..model import Checkpoint, MLAConfig
from ..model.indexer import warn_if_inexact
from ..model.preflight import check_layer_options, layer_config, layer_positions
from ..model.weight_recipe import WeightRecipe, require_fp8
from ..parallel import CachedExecutor, MLALayer, Patch, check_device
from ..parallel.observe import RunDescription, announce, parts_of_one_result
from ..scenarios import SCENARIOS, Resolution, Scenario
from ..scenarios import scenario as scenario_of
from ..verdict import DIVERGENCE_FACTOR, dense_twin, diverges, step_floor
from .bisection import Bisector, BisectStats, Culprit, CulpritGroup, KnownFix, Remedy, group_culprits, progress_bar
from .caveats import Caveat, caveats_of
from .diff import RunDiff, block_errors, compare
from .patching import PatchConfirmation, confirm_by_patching
from .positions import TokenPositions
from .provenance import Provenance, collect
from .report import RunReport, TriageReport, report_of, write_json
from .tables import error_matrix_frame, summary_frame

MODES = ("prefill", "decode")

__all__ = [
    "MODES",
    "ConfigResult",
    "Culprit",
    "CulpritGroup",
    "KnownFix",
    "PatchConfirmation",
    "Remedy",
    "TriageResult",
    "TriageSession",
    "bisect",
    "triage",
]


class TriageSession:
    """Everything a triage reuses across scenarios: config, checkpoint, inputs, the fp32 truth and the
    reference runs per (TP size, mode), loaded linears and GEMM results (`parallel.cached`), and the
    outcomes of bisection trials. Build one and pass it to several `triage` calls.

    ``reuse=False`` builds every layer from scratch (as `MLALayer` does) and disables the outcome memo
    and the pruning that rest on it: slower, and the yardstick the reuse is tested against.

    The tokens sit at ``start_position, start_position + 1, ...`` (default 0), or at explicit
    ``positions`` (one per token; `tokens` then defaults to their number); every one must lie below the
    config's max_position_embeddings. A checkpoint with dense linear weights is refused
    (`model.weight_recipe.DenseWeightsError`: a dense run cannot show an FP8 bug) unless ``quantize``
    names the recipe that block-quantizes them first (``"deepseek"``: DeepSeek's released-checkpoint
    recipe). ``ignore_extra`` skips unknown attention tensors of a checkpoint folder (named in the
    caveats). `caveats` lists what the verdicts do not cover (`triage.caveats`); a DeepSeek-V3.2
    layer with more tokens than its ``index_topk`` also warns (`model.indexer.SparseAttentionWarning`).
    """

    def __init__(
        self,
        model: str | MLAConfig = "deepseek-v3",
        platform="mi355x",
        tokens: int | None = None,
        seed: int = 0,
        checkpoint: Checkpoint | str | Path | None = None,
        layer: int = 0,
        progress=None,
        device: str | None = None,
        reuse: bool = True,
        *,
        start_position: int = 0,
        positions=None,
        quantize: str | None = None,
        ignore_extra: bool = False,
    ) -> None:
        from ..kernels import platform as platform_of

        if tokens is None:
            tokens = 16 if positions is None else len(positions)
        if tokens < 1:
            raise ValueError(f"tokens={tokens} must be >= 1")
        self.platform = platform_of(platform)
        self.device = triage_session_device(device, self.platform)
        # Positions are known from the config alone: a bad start fails before any weight is built or read.
        self.positions = layer_positions(layer_config(model, checkpoint), tokens, start_position, positions)
        if checkpoint is None:
            if quantize is not None:
                raise ValueError(
                    f"quantize={quantize!r}: synthetic weights are block-quantized already (DeepSeek's recipe); "
                    "a recipe applies to a dense checkpoint"
                )
            cfg = model if isinstance(model, MLAConfig) else MLAConfig.preset(model)
            ckpt = Checkpoint.synthetic(cfg, seed=seed, progress=progress)
            self.checkpoint_source: str | None = None
        else:
            if isinstance(checkpoint, Checkpoint):
                ckpt = checkpoint
            else:
                ckpt = Checkpoint.load(checkpoint, layer=layer, ignore_extra=ignore_extra)
            self.checkpoint_source = ckpt.source or (str(checkpoint) if not isinstance(checkpoint, Checkpoint) else "")
            require_fp8(ckpt.quantized, quantize, f"checkpoint {ckpt.source or ckpt.cfg.name} layer {ckpt.layer}")
        # How dense weights were made FP8 here (None: the weights are the checkpoint's, or synthetic).
        self.recipe: WeightRecipe | None = None if quantize is None else WeightRecipe.for_config(ckpt.cfg, quantize)
        if self.recipe is not None:
            ckpt = ckpt.quantized_with(self.recipe)
        self.ckpt = ckpt.to(self.device)  # once, not per layer built
        self.cfg = self.ckpt.cfg
        self.tokens, self.seed = tokens, seed
        self.caveats: list[Caveat] = caveats_of(self.ckpt, tokens, self.recipe)
        warn_if_inexact(self.cfg, tokens)
        gen = torch.Generator().manual_seed(seed)
        self.hidden = torch.randn(tokens, self.cfg.hidden_size, generator=gen).to(torch.bfloat16)
        self._truth: dict[str, object] = {}
        self._reference: dict[tuple[int, str], object] = {}
        self._floor: dict[tuple[int, str], dict[str, float]] = {}
        self._twins: dict[tuple[int, str], str] = {}
        self.cache = CachedExecutor(self.cfg, self.ckpt, self.platform) if reuse else None
        # Bisection trial outcomes by effective configuration (see `outcome_key`), across scenarios.
        self.outcomes: dict[tuple, object] = {}

    @property
    def reuse(self) -> bool:
        return self.cache is not None

    def truth(self, mode: str):
        """The fp32 TP1 run of `mode` on the dequantized weights. Every mode's is made at the first call:
        the fp32 weights are four times the checkpoint's size, so they live only while nothing else of
        the session's is built, and are dropped once both truths exist."""
        if not self._truth:
            dense = dense_twin(self.ckpt)
            layer = MLALayer(self.cfg, dense, 1, self.platform, "reference", torch.float32, device=self.device)
            for m in MODES:
                self._truth[m] = layer.run(self.hidden, self.positions, m)
        return self._truth[mode]

    def reference(self, tp: int, mode: str):
        if (tp, mode) not in self._reference:
            self._reference[(tp, mode)] = self.run(SCENARIOS["reference"], tp, mode)
        return self._reference[(tp, mode)]

    def floor(self, tp: int, mode: str) -> dict[str, float]:
        if (tp, mode) not in self._floor:
            truth = self.truth(mode)  # first: its fp32 weights are gone before the reference's are decoded
            self._floor[(tp, mode)] = step_floor(self.reference(tp, mode), truth)
        return self._floor[(tp, mode)]

    def run(self, scen: Scenario | str, tp: int, mode: str):
        return self.traced_run(scen, tp, mode)[0]

    def traced_run(self, scen: Scenario | str, tp: int, mode: str):
        """(LayerRun, per step the linears it read - None without reuse)."""
        scen = scenario_of(scen)
        if self.cache is None:
            layer = MLALayer(self.cfg, self.ckpt, tp, self.platform, scen, device=self.device)
            return layer.run(self.hidden, self.positions, mode), None
        traced = self.cache.run(scen, tp, mode, self.hidden, self.positions)
        return traced.run, traced.accessed

    def patched_run(self, scen: Scenario | str, tp: int, mode: str, patch: Patch):
        """The run of `scen` at (tp, mode) on the session's inputs with `patch` applied (activation
        patching, `triage.patching`); reuses loaded linears and the GEMM results up to the patch."""
        scen = scenario_of(scen)
        if self.cache is None:
            layer = MLALayer(self.cfg, self.ckpt, tp, self.platform, scen, device=self.device)
            return layer.run(self.hidden, self.positions, mode, patch=patch)
        return self.cache.run(scen, tp, mode, self.hidden, self.positions, patch=patch).run

    def diff(self, scen: Scenario | str, tp: int, mode: str, factor: float = DIVERGENCE_FACTOR) -> RunDiff:
        return self.traced_diff(scen, tp, mode, factor)[0]

    def traced_diff(self, scen: Scenario | str, tp: int, mode: str, factor: float = DIVERGENCE_FACTOR):
        """(RunDiff, per step the linears it read - None without reuse)."""
        run, accessed = self.traced_run(scen, tp, mode)
        return compare(run, self.reference(tp, mode), self.floor(tp, mode), factor), accessed

    def trial(
        self, scen: Scenario, tp: int, mode: str, factor: float = DIVERGENCE_FACTOR
    ) -> tuple[str | None, frozenset[str] | None]:
        """(first divergent step or None when every step is within its threshold, the linears read up to
        it - None without reuse). With reuse the run stops at that step: nothing after it can change
        either answer."""
        scen = scenario_of(scen)
        if self.cache is None:
            return self.diff(scen, tp, mode, factor).first_divergent_step, None
        reference, floor = self.reference(tp, mode), self.floor(tp, mode)
        first: list[str] = []

        def until(record) -> bool:
            if diverges(record, reference, floor, factor):
                first.append(record.name)
            return bool(first)

        traced = self.cache.run(scen, tp, mode, self.hidden, self.positions, until=until)
        twin = self.twin_mode(tp, mode)
        if traced.programs[twin] != traced.programs[mode]:
            # twin_mode proved it on the reference scenario; a scenario whose program depends on more
            # than the mode would make outcomes shared between modes wrong.
            raise RuntimeError(
                f"{scen.name}: the step program of {mode} differs from {twin} at TP{tp} although the "
                "reference scenario's do not; outcomes cannot be shared between these modes"
            )
        if not first:
            return None, None
        return first[0], frozenset().union(*traced.accessed)

    # -- what bisection reuses -------------------------------------------------------------------------
    def outcome_key(self, scen: Scenario, tp: int, mode: str, factor: float) -> tuple | None:
        """The key under which a run's outcome is the same for every scenario: TP size, mode, factor and
        the effective configuration (`CachedExecutor.effective_key`); None without reuse."""
        if self.cache is None:
            return None
        return (self.twin_mode(tp, mode), float(factor), self.cache.effective_key(scen, tp))

    def twin_mode(self, tp: int, mode: str) -> str:
        """The first mode (in MODES order) whose runs at `tp` are provably bitwise those of `mode`, else
        `mode`: both run the same step program, and their reference runs and noise floors are bitwise
        equal. DeepSeek-V4 has one program for prefill and decode, so its decode bisection reuses every
        prefill trial; DeepSeek-V3's absorbed decode is another program."""
        if self.cache is None:
            return mode
        if (tp, mode) not in self._twins:
            self._twins[(tp, mode)] = mode
            programs = self.cache.programs(SCENARIOS["reference"], tp)
            for other in MODES:
                if other == mode:
                    break
                if programs[other] == programs[mode] and self._same_yardsticks(tp, other, mode):
                    self._twins[(tp, mode)] = other
                    break
        return self._twins[(tp, mode)]

    def _same_yardsticks(self, tp: int, a: str, b: str) -> bool:
        ref_a, ref_b = self.reference(tp, a).records, self.reference(tp, b).records
        if list(ref_a) != list(ref_b) or self.floor(tp, a) != self.floor(tp, b):
            return False
        return all(
            (x.output is None and y.output is None)
            or (x.output is not None and y.output is not None and _bitwise_equal(x.output, y.output))
            for x, y in zip(ref_a.values(), ref_b.values())
        )

    def linear_keys(self, scen: Scenario, tp: int) -> dict[str, tuple] | None:
        """Per linear, what `scen` decides about it (kernel configuration, model side); None without reuse."""
        return None if self.cache is None else self.cache.linear_keys(scen, tp)

    def tuned_table(self, scen: Scenario) -> TunedTable:
        """The tuned table `scen`'s kernel choice consults (its ``origin`` and ``source`` say where from)."""
        if self.cache is not None:
            return self.cache.tuned(scen)
        return scen.policy(self.platform).tuned

    def tuned_source(self, scen: Scenario) -> str:
        """Where the tuned table that `scen`'s kernel choice consults came from (TunedTable.source)."""
        return self.tuned_table(scen).source


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def triage_session_device(device: str | None, plat) -> torch.device:
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
class TriageResult:
    """A live TP triage: every configuration's RunDiff (with the runs' tensors), culprits, provenance,
    and for every diverged configuration the activation-patching check of its first divergent step
    (`patching[(tp, mode)]`, a `PatchConfirmation`: does substituting the reference's output there
    restore everything downstream, and if not, which further steps must be patched?).

    `report()` is the same as plain data - what the HTML report (`md.write_html`), the terminal and a
    saved JSON show; `to_json` writes it. `positions` says where the tokens sat in the sequence;
    `caveats` what the verdicts do not cover (`triage.caveats`: V3.2's indexer not modelled, weights
    quantized here, tensors ignored).
    """

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
    provenance: Provenance | None = None
    bisection: BisectStats = field(default_factory=BisectStats)
    patching: dict[tuple[int, str], PatchConfirmation] = field(default_factory=dict)
    # How an engine profile was resolved on the platform (engine, settings in effect, rules applied);
    # None for a scenario that is no profile.
    profile: Resolution | None = None
    positions: TokenPositions = field(default_factory=TokenPositions)
    caveats: list[Caveat] = field(default_factory=list)
    _report: TriageReport | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def description(self) -> RunDescription:
        """What was triaged (the TP sizes and modes as tuples); the runs ran in this process."""
        return RunDescription.of(self, tuple(self.tp_sizes), tuple(self.modes), "simulated")

    @property
    def culprit_groups(self) -> list[CulpritGroup]:
        """Culprits grouped by `Culprit.group_key` (same step, layer, causes, remedies), in first-seen order:
        eight near-identical blocks for TP1..8 x prefill/decode become one per distinct story."""
        return group_culprits(self.culprits)

    def config(self, tp: int, mode: str) -> ConfigResult:
        return find(self.configs, lambda c: (c.tp, c.mode), (tp, mode), f"no run at TP{tp} {mode}", "have")

    @property
    def summary(self):
        """pandas DataFrame: one row per (TP size, mode) (see `triage.tables.summary_frame`)."""
        return summary_frame(RunReport.of(c) for c in self.configs)

    def step_table(self, tp: int, mode: str):
        return self.config(tp, mode).diff.table

    def error_matrix(self, mode: str):
        """pandas DataFrame of relative error: rows TP sizes, columns steps (in order)."""
        return error_matrix_frame((RunReport.of(c) for c in self.configs), mode)

    def default_step(self, tp: int, mode: str) -> str:
        """The step worth opening first: the first divergent one, else the worst."""
        diff = self.config(tp, mode).diff
        return diff.first_divergent_step or diff.worst.name

    def block_errors(self, tp: int, mode: str, step: str | None = None) -> torch.Tensor:
        """(tokens, 128-column blocks) relative error of `step` (default: `default_step`)."""
        c = self.config(tp, mode)
        name = step or self.default_step(tp, mode)
        return block_errors(c.diff.run.records[name].output, c.diff.reference.records[name].output)

    def report(self, block_steps: Iterable[tuple[int, str, str | None]] = ()) -> TriageReport:
        """Everything the HTML report, the terminal summary and the notebooks show, as plain data (no
        tensors; JSON round trip). It keeps the block errors of every diverged configuration's first
        divergent step; `block_steps` ((tp, mode, step or None for the default step)) adds others.
        The report without extra blocks is made once and then reused."""
        block_steps = tuple(block_steps)
        if block_steps:
            return report_of(self, block_steps)
        if self._report is None:
            self._report = report_of(self)
        return self._report

    def to_dict(self) -> dict:
        """The report's JSON data (schema 6; see `triage.report`)."""
        return self.report().to_dict()

    def to_json(self, path) -> Path:
        """Write the report as JSON; never overwrites (a taken name gets `stem-2.json`). The HTML report
        is drawn by `mla_debug.viz` (``md.write_html(result, path)``)."""
        return write_json(self.report(), path)


def bisect(
    session: TriageSession,
    scen: Scenario | str,
    tp: int,
    mode: str,
    max_changes: int = 3,
    factor: float = DIVERGENCE_FACTOR,
    progress: bool | None = None,
) -> Culprit | None:
    """The smallest sets of changes that restore (tp, mode) under `scen`, as a Culprit (None when it does
    not diverge or nothing within `max_changes` code changes or two kernel disables restores it).

    >>> culprit = md.bisect(md.TriageSession("mini"), "vllm-pr51692", 4, "decode")
    >>> culprit.explanation, culprit.workarounds[0].setting, culprit.known_fix
    """
    with parts_of_one_result():  # its trial runs are not results of their own
        return Bisector(session, scenario_of(scen), factor, progress).bisect(tp, mode, max_changes=max_changes)


def _confirm(session: TriageSession, scen: Scenario, c: ConfigResult, factor: float, done: dict) -> PatchConfirmation:
    """The patching confirmation of one diverged configuration, run right after its bisection (the
    decoded weights of its TP size are still held). A mode that provably computes what an earlier
    one did (`TriageSession.twin_mode`: DeepSeek-V4's prefill and decode) takes that mode's confirmation."""
    twin = session.twin_mode(c.tp, c.mode)
    if (c.tp, twin) in done and twin != c.mode:
        programs = session.cache.programs(scen, c.tp)
        if programs[twin] == programs[c.mode]:
            return done[(c.tp, twin)].in_mode(c.mode)
    return confirm_by_patching(session, scen, c.tp, c.mode, diff=c.diff, factor=factor)


def triage(
    model: str | MLAConfig = "deepseek-v3",
    platform="mi355x",
    scenario: Scenario | str = "vllm-pr51692",
    tp_sizes=(1, 2, 4, 8),
    tokens: int | None = None,
    modes=MODES,
    seed: int = 0,
    checkpoint=None,
    session: TriageSession | None = None,
    find_culprits: bool = True,
    factor: float = DIVERGENCE_FACTOR,
    progress: bool | None = None,
    device: str | None = None,
    patching: bool = True,
    **session_options,
) -> TriageResult:
    """Run the layer at every TP size and mode under `scenario` (an engine profile is resolved on the
    platform first: `Scenario.resolve`); see TriageResult.

    Pass a `TriageSession` to reuse its checkpoint, inputs, truth and reference runs across scenarios
    (tokens default to 16 without one). The keyword-only options of `TriageSession` (start_position,
    positions, quantize, ignore_extra) build the session; with one given, they are its business. Needs only the CPU; `device` ("cpu" or "cuda") defaults to the GPU
    for an NVIDIA platform when one is visible (see `triage_session_device`). With `patching` (the default)
    every diverged configuration is run again with its first divergent step's output taken from the
    reference, to confirm the fault is inside that step, and where it is not, with the steps that still
    diverge patched too (`triage.patching.confirm_by_patching`, `TriageResult.patching`).

    >>> result = md.triage("deepseek-v3", "mi355x", "vllm-pr51692", tp_sizes=(1, 2, 4, 8))
    >>> result.summary; result.culprits[0].explanation; result.patching[(4, "decode")].verdict
    """
    start = time.perf_counter()
    scen = scenario_of(scenario)
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    unknown = [name for name in session_options if name not in SESSION_OPTIONS]
    if unknown:
        raise TypeError(
            f"triage() got an unexpected keyword argument {unknown[0]!r}; the options that build the session "
            f"are {', '.join(SESSION_OPTIONS)}"
        )
    given = [name for name, value in session_options.items() if not _is_default(value, SESSION_OPTIONS[name])]
    if session is None:
        # Everything cheap first: a TP size that does not divide the heads must not wait for the weights.
        check_layer_options(model, checkpoint, tp_sizes=tp_sizes, tokens=tokens, **session_options)
    elif given:
        raise ValueError(
            f"{', '.join(given)}: options of the TriageSession; with session= given, build the TriageSession with them"
        )
    elif tokens is not None and tokens != session.tokens:
        raise ValueError(f"tokens={tokens} differs from the session's {session.tokens}; build another TriageSession")
    elif device is not None and torch.device(device).type != session.device.type:
        raise ValueError(f"device={device!r} differs from the session's {session.device}; build another TriageSession")
    else:
        for tp in tp_sizes:
            session.cfg.check_tp(tp)
    # The many runs below are parts of the one result; it announces itself to listeners (md.profile).
    with parts_of_one_result():
        if session is None:
            session = TriageSession(model, platform, tokens, seed, checkpoint, device=device, **session_options)
        # An engine profile becomes a plain scenario for this platform here, so every run and every
        # bisection change below acts on resolved fields (a change replaces fields; rules would undo it).
        scen = scen.resolve(session.platform)
        configs, traces = [], {}
        with progress_bar(len(tp_sizes) * len(modes), progress, f"triage {session.cfg.name} {scen.name}") as bar:
            for tp in tp_sizes:
                for mode in modes:
                    diff, accessed = session.traced_diff(scen, tp, mode, factor)
                    configs.append(ConfigResult(tp, mode, diff))
                    traces[(tp, mode)] = accessed
                    bar.update()
        culprits, unresolved, patched = [], [], {}
        bisector = Bisector(session, scen, factor, progress)
        for c in configs:
            if c.verdict != "diverged":
                continue
            if find_culprits:
                culprit = bisector.bisect(c.tp, c.mode, c.diff, traces[(c.tp, c.mode)])
                if culprit:
                    culprits.append(culprit)
                else:
                    unresolved.append((c.tp, c.mode))
            if patching:
                patched[(c.tp, c.mode)] = _confirm(session, scen, c, factor, patched)
        result = TriageResult(
            model=session.cfg.name,
            platform=session.platform.name,
            scenario=scen.name,
            tokens=session.tokens,
            seed=session.seed,
            tp_sizes=tuple(tp_sizes),
            modes=tuple(modes),
            configs=configs,
            culprits=culprits,
            elapsed_s=time.perf_counter() - start,
            unresolved=unresolved,
            device=session.device.type,
            provenance=collect(session, scen, factor),
            bisection=bisector.stats,
            patching=patched,
            profile=scen.resolution,
            positions=TokenPositions.of(session.positions),
            caveats=list(session.caveats),
        )
    return announce(result)


# The options that build a session, triage() takes too: TriageSession's keyword-only parameters, read
# from the class (so the two cannot drift apart) and shown in triage's signature (help, Jupyter).
SESSION_OPTIONS = {
    p.name: p for p in inspect.signature(TriageSession).parameters.values() if p.kind is p.KEYWORD_ONLY
}
triage.__signature__ = inspect.signature(triage).replace(  # type: ignore[attr-defined]
    parameters=[
        *(p for p in inspect.signature(triage).parameters.values() if p.kind is not p.VAR_KEYWORD),
        *SESSION_OPTIONS.values(),
    ]
)


def _is_default(value: object, option: inspect.Parameter) -> bool:
    """Whether a session option was left at its default (compared by identity first: positions may be a
    tensor, which has no plain ==)."""
    return value is option.default or (isinstance(value, (bool, int, str)) and value == option.default)
