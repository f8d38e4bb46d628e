"""Culprit bisection: the smallest sets of changes that bring one diverged configuration back within its
noise threshold, found by running them, as code fixes and as configuration workarounds.

The search goes by size (every single change, then pairs, then triples) and stops at the first size
where some set restores the run. Within a size, sets with fewer reference-kernel swaps go first and
the search stops after the first swap count where some set restores: the alternatives reported are
all the sets minimal by (size, swaps), and the headline is the one the earlier exhaustive search
preferred. What keeps it fast without changing that answer:

- runs reuse loaded linears and GEMM results (`parallel.cached`), and a trial run stops at the first
  step that diverges (nothing after it changes the outcome);
- a set whose effective configuration (every layer's kernel and options, the model behaviour) was
  already run - in this search, for another configuration or another scenario - is not run again, and
  prefill and decode share outcomes when they provably compute the same thing (`TriageSession.twin_mode`);
- a set is skipped when one of its changes provably cannot matter: the change alters nothing that
  the other changes' run read at or before the step where that run diverges, so the steps up to
  there are bitwise the same and the set diverges there too. "Read" is recorded per step while the
  run executes (which linears each step looked up), so the proof needs no list of which step uses
  which layer. A model-side behaviour change is always assumed to matter;
- the search for configuration workarounds (kernel disables, and for an engine profile its declared
  environment variables and server arguments set to another allowed value) is separate and tiny: one
  candidate per kernel that ran and per setting value that changes the resolved scenario.

Every remedy reported was verified by actually running the changed scenario at that configuration.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._json_records import JsonRecord
from .._progress import progress
from ..layouts import ContractViolation
from ..scenarios import Scenario
from ..scenarios import scenario as scenario_of
from ..verdict import DIVERGENCE_FACTOR
from .changes import (
    KERNEL_TO_REFERENCE,
    SET_SETTING,
    Change,
    RemedyKind,
    apply_all,
    candidate_changes,
    candidate_workarounds,
    describe,
    env_setting,
    explain,
)
from .diff import RunDiff

MAX_CODE_CHANGES = 3
MAX_DISABLES = 2


@dataclass(frozen=True)
class Outcome:
    """What a trial run says: does it restore, where does it diverge, what did it read up to there."""

    restores: bool
    first_step: str | None = None
    accessed: frozenset[str] | None = None  # linears read at or before first_step; None: unknown
    error: str | None = None  # why the changed scenario could not be built

    @classmethod
    def of(cls, diff: RunDiff, accessed: list[frozenset[str]] | None) -> Outcome:
        first = diff.first_divergent_step
        if first is None:
            return cls(restores=True)
        if accessed is None:
            return cls(restores=False, first_step=first)
        upto = list(diff.run.records).index(first) + 1
        return cls(restores=False, first_step=first, accessed=frozenset().union(*accessed[:upto]))


@dataclass(frozen=True)
class Remedy:
    """A set of changes that restores a configuration (verified by running it)."""

    kind: RemedyKind
    changes: tuple[Change, ...]

    @property
    def description(self) -> str:
        return describe(self.changes)

    @property
    def setting(self) -> str | None:
        """What a user sets for a workaround, e.g. ``VLLM_DISABLED_KERNELS=AiterPreshuffledFp8BlockScaledMMKernel``
        or, for an engine profile's declared setting, ``VLLM_ROCM_USE_AITER=0``."""
        return env_setting(self.changes)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind.value,
            "description": self.description,
            "setting": self.setting,
            "changes": [c.to_dict() for c in self.changes],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Remedy:
        return cls(RemedyKind(data["kind"]), tuple(Change.from_dict(c) for c in data["changes"]))


@dataclass(frozen=True)
class KnownFix(JsonRecord):
    """The upstream change known to fix the scenario (`Scenario.fixed_by`), run at this configuration."""

    scenario: str  # the scenario that models the fix
    upstream: str  # e.g. "vLLM PR #56433"
    restores: bool  # whether running it brought this configuration back


@dataclass
class Culprit(JsonRecord):
    """Why one configuration diverged and what brings it back.

    ``changes``/``change``/``explanation`` are the headline remedy: the preferred code fix (fewest
    reference-kernel swaps, then the layer's step order), else a workaround when no code change in
    reach restores. ``code_fixes`` and ``workarounds`` list every minimal alternative of each kind,
    the headline's kind first; ``known_fix`` says whether the scenario's known upstream fix restores.
    """

    tp: int
    mode: str
    step: str
    layer: str
    change: str
    explanation: str
    changes: list[Change] = field(default_factory=list)
    code_fixes: list[Remedy] = field(default_factory=list)
    workarounds: list[Remedy] = field(default_factory=list)
    known_fix: KnownFix | None = None
    violations: list[ContractViolation] = field(default_factory=list)
    trials: int = 0  # changed scenarios run (or reused) for this configuration

    _json_missing: ClassVar[dict[str, Any]] = {"layer": ""}  # reports from before layers were named

    @property
    def group_key(self) -> tuple:
        """Culprits with one key read the same apart from TP size and mode (see TriageResult.culprit_groups)."""
        return (
            self.step,
            self.layer,
            tuple(self.changes),
            tuple(self.code_fixes),
            tuple(self.workarounds),
            self.known_fix,
            tuple(dict.fromkeys((v.kind, v.consumer, v.found) for v in self.violations)),
        )


@dataclass(frozen=True)
class CulpritGroup:
    """Culprits that read the same apart from TP size and mode, shown once with the configs they cover."""

    configs: tuple[tuple[int, str], ...]
    culprits: tuple[Culprit, ...]

    @property
    def culprit(self) -> Culprit:
        """The first member (they share step, layer, causes and every remedy)."""
        return self.culprits[0]


def group_culprits(culprits) -> list[CulpritGroup]:
    """Culprits grouped by `Culprit.group_key`, in first-seen order."""
    groups: dict[tuple, list[Culprit]] = {}
    for culprit in culprits:
        groups.setdefault(culprit.group_key, []).append(culprit)
    return [CulpritGroup(tuple((c.tp, c.mode) for c in members), tuple(members)) for members in groups.values()]


@dataclass
class BisectStats(JsonRecord):
    """What bisection cost: trials planned and run, results reused, sets proved not to matter."""

    trials: int = 0  # trials the progress bars counted (run or reused)
    runs: int = 0  # trials that ran the layer
    reused: int = 0  # trials answered from an identical effective configuration
    skipped: int = 0  # sets never tried: one of their changes provably cannot matter
    elapsed_s: float = 0.0


def progress_bar(total: int | None, enabled: bool | None, desc: str, unit: str = "run"):
    """Triage's and bisection's progress (see `mla_debug._progress`): a bar in a terminal or notebook,
    whole lines in a log when asked for. The total may grow while it runs (``bar.total += n``): bisection
    plans one set size at a time."""
    return progress(total=total, desc=desc, unit=unit, enabled=enabled)


class Bisector:
    """Bisects diverged configurations of one scenario on one TriageSession; counts what it cost."""

    def __init__(self, session, scen: Scenario, factor: float = DIVERGENCE_FACTOR, progress: bool | None = None):
        # Changes replace fields of the resolved scenario (an engine profile's rules applied for the
        # session's platform); a setting change re-resolves the profile it came from (`changes.Change`).
        self.session, self.scen, self.factor, self.progress = session, scen.resolve(session.platform), factor, progress
        self.stats = BisectStats()
        # Every set not tried because one of its changes provably cannot matter: (tp, mode, the set,
        # the step where it diverges like the smaller set it was proved equal to up to there).
        self.skipped: list[tuple[int, str, tuple[Change, ...], str]] = []

    # -- trials --------------------------------------------------------------------------------------
    def outcome(self, scen: Scenario, tp: int, mode: str) -> Outcome:
        """Run `scen` at (tp, mode), or reuse the outcome of an identical effective configuration."""
        session = self.session
        try:
            key = session.outcome_key(scen, tp, mode, self.factor)
        except ValueError as err:  # no kernel left for some layer (e.g. every candidate disabled)
            return Outcome(restores=False, error=str(err))
        if key is not None and key in session.outcomes:
            self.stats.reused += 1
            return session.outcomes[key]
        try:
            first, accessed = session.trial(scen, tp, mode, self.factor)
        except ValueError as err:
            return Outcome(restores=False, error=str(err))
        self.stats.runs += 1
        result = Outcome(restores=first is None, first_step=first, accessed=accessed)
        if key is not None:
            session.outcomes[key] = result
        return result

    def _matters(self, change: Change, base: frozenset, outcome: Outcome, tp: int) -> bool:
        """False only when `change` provably alters nothing that the run of `base` read up to its first
        divergent step (then base + change diverges at that same step)."""
        if outcome.accessed is None or outcome.error is not None or change.kind == "behaviour":
            return True
        try:
            before = self.session.linear_keys(apply_all(self.scen, sorted(base, key=repr)), tp)
            after = self.session.linear_keys(apply_all(self.scen, [*sorted(base, key=repr), change]), tp)
        except ValueError:
            return True
        if before is None or after is None:
            return True
        return any(before[name] != after[name] for name in outcome.accessed)

    def _search(self, pool: list[Change], base: Outcome, tp: int, mode: str, max_size: int, bar) -> list[tuple]:
        """Every minimal set of `pool` (by size, up to `max_size`) that restores (tp, mode)."""
        known: dict[frozenset, Outcome] = {frozenset(): base}
        for size in range(1, min(max_size, len(pool)) + 1):
            plan = []
            for combo in itertools.combinations(pool, size):
                if _sets_one_setting_twice(combo):
                    continue  # the later value would simply win: the set is one of its members
                members = frozenset(combo)
                parent = next(
                    (members - {c} for c in combo if not self._matters(c, members - {c}, known[members - {c}], tp)),
                    None,
                )
                if parent is not None:
                    known[members] = known[parent]
                    self.stats.skipped += 1
                    self.skipped.append((tp, mode, combo, known[parent].first_step))
                else:
                    plan.append(combo)
            bar.total = (bar.total or 0) + len(plan)
            # Sets with fewer reference-kernel swaps first: a swap localises a fault but is no fix a
            # serving engine ships, so once sets with k swaps restore, sets with more are not tried.
            plan.sort(key=_swaps)
            for _, same in itertools.groupby(plan, key=_swaps):
                restoring = []
                for combo in same:
                    outcome = self.outcome(apply_all(self.scen, combo), tp, mode)
                    known[frozenset(combo)] = outcome
                    self.stats.trials += 1
                    bar.update()
                    if outcome.restores:
                        restoring.append(combo)
                if restoring:
                    bar.total = bar.n  # the rest of the plan is not needed
                    return restoring
        return []

    # -- one configuration ---------------------------------------------------------------------------
    def bisect(
        self, tp: int, mode: str, failing: RunDiff | None = None, accessed=None, max_changes: int = MAX_CODE_CHANGES
    ) -> Culprit | None:
        """The Culprit of (tp, mode), or None when it does not diverge or nothing in reach restores it."""
        start = time.perf_counter()
        session, scen = self.session, self.scen
        if failing is None:
            failing, accessed = session.traced_diff(scen, tp, mode, self.factor)
        if not failing.diverged:
            return None
        base = Outcome.of(failing, accessed)
        key = session.outcome_key(scen, tp, mode, self.factor)
        if key is not None:
            session.outcomes.setdefault(key, base)
        trials_before = self.stats.trials
        # The total grows as each size's plan is made (and shrinks to what ran when a size restores).
        with progress_bar(None, self.progress, f"bisect TP{tp} {mode}", unit="trial") as bar:
            code_pool = candidate_changes(scen, failing.run.kernels, session.cfg)
            code = self._search(code_pool, base, tp, mode, max_changes, bar)
            disables = candidate_workarounds(scen, failing.run.kernels)
            work = self._search(disables, base, tp, mode, MAX_DISABLES, bar)
            known = None
            if scen.fixed_by:
                fix = scenario_of(scen.fixed_by).resolve(session.platform)
                bar.total = (bar.total or 0) + 1
                outcome = self.outcome(fix, tp, mode)
                self.stats.trials += 1
                bar.update()
                known = KnownFix(fix.name, fix.upstream or fix.description, outcome.restores)
        self.stats.elapsed_s += time.perf_counter() - start
        if not code and not work:
            return None
        # `_search` returns the restoring sets with the fewest reference swaps, in the order of the
        # layer's steps; the first is the headline (model-side fixes and honoured flags - what a
        # serving engine would change - before swapping a kernel out).
        code_fixes = code
        headline = code_fixes[0] if code_fixes else work[0]
        first = failing.first_divergent
        violations = [v for s in failing.steps for v in s.effective_violations]
        at_first = first.effective_violations or violations[:1]
        layer = _layer_of(first.name, headline, failing)
        return Culprit(
            tp=tp,
            mode=mode,
            step=first.name,
            layer=layer,
            change="; ".join(c.description for c in headline),
            explanation=explain(layer, tp, mode, at_first, list(headline)),
            changes=list(headline),
            code_fixes=[Remedy(RemedyKind.CODE_FIX, combo) for combo in code_fixes],
            workarounds=[Remedy(RemedyKind.WORKAROUND, combo) for combo in work],
            known_fix=known,
            violations=list(at_first),
            trials=self.stats.trials - trials_before,
        )


def _sets_one_setting_twice(combo) -> bool:
    targets = [c.target for c in combo if c.kind == SET_SETTING]
    return len(targets) != len(set(targets))


def _swaps(combo) -> int:
    return sum(c.kind == KERNEL_TO_REFERENCE for c in combo)


def _layer_of(step: str, combo, diff: RunDiff) -> str:
    """The layer a culprit is about: the swapped kernel's layer, else the first effective violation's."""
    for change in combo:
        if change.kind == KERNEL_TO_REFERENCE:
            return change.target
    for s in diff.steps:
        for v in s.effective_violations:
            return v.module
    return step
