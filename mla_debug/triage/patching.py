"""Is the fault inside the first divergent step? Activation patching answers it.

A diverged configuration's first divergent step S is where the damage shows first, not necessarily
where all of it is made. Running the configuration again with S's output taken from the reference run
(`mla_debug.parallel.Patch`) and comparing every later step with the reference again, by the triage's
own rule (`diff.step_verdict`, as `diff.compare`: threshold max(factor x floor, MIN_THRESHOLD) per
step), decides it:

- RESTORED: every step after S, and so the layer output, is back within its threshold: the fault is
  inside S (its kernel, the layout it read, the bytes it was given).
- NOT_RESTORED: some later step still diverges: a second fault downstream of S (a second reader of the
  same re-laid weight counts: absorbed decode's absorb_uv reads kv_b_proj's bytes like absorb_uk), or
  an earlier one that reaches a later step without passing through S's output and stayed below the
  noise floor on the way. `PatchResult.still_diverged` names the steps.
- NOT_PATCHABLE: S's output cannot be substituted, because later steps read something other than what
  it records (DeepSeek-V4's fused q_norm, whose consumers read its FP8 data and scales).

`confirm_by_patching` goes on where S alone does not restore: it patches the first step that still
diverges as well, and again, until the layer is restored (or `max_steps` steps are patched), so the
last attempt names every step a fault sits in.

Results are plain typed data with every number behind the verdict (per step: rel_err before and after,
floor, threshold, diverged before and after), JSON-ready through `to_dict`/`from_dict`.

    confirmation = confirm_by_patching(session, "vllm-pr51692", 4, "decode")
    confirmation.verdict, confirmation.first.still_diverged, confirmation.restoring_steps
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .._json_records import JsonRecord
from .._str_enum import StrEnum
from ..model.program import StepNotReplaceable
from ..parallel.patch import Patch
from ..scenarios import Scenario
from ..scenarios import scenario as scenario_of
from ..verdict import DIVERGENCE_FACTOR, MIN_THRESHOLD, step_verdict
from .diff import RunDiff, StepDiff


class PatchVerdict(StrEnum):
    RESTORED = "restored"
    NOT_RESTORED = "not-restored"
    NOT_PATCHABLE = "not-patchable"


@dataclass(frozen=True)
class StepRecovery(JsonRecord):
    """One step of a patched configuration against the reference, before and after patching."""

    name: str
    index: int  # position in the layer's step order
    rel_err_before: float
    rel_err_after: float
    floor: float | None
    threshold: float | None
    diverged_before: bool
    diverged_after: bool


@dataclass(frozen=True)
class PatchResult(JsonRecord):
    """One run of the (tp, mode) configuration of `scenario` with the outputs of `steps` taken from the
    `reference` scenario's run, and its verdict.

    ``patched`` holds the patched steps (their error after patching is the substitution's: zero for a
    reference of the same TP size); ``downstream`` every other step after the first patched one, in
    order, the last being the layer output. Both are empty for NOT_PATCHABLE. ``factor`` and
    ``min_threshold`` are the divergence rule the thresholds came from.
    """

    tp: int
    mode: str
    scenario: str
    reference: str
    steps: tuple[str, ...]
    verdict: PatchVerdict
    patched: tuple[StepRecovery, ...]
    downstream: tuple[StepRecovery, ...]
    factor: float = DIVERGENCE_FACTOR
    min_threshold: float = MIN_THRESHOLD

    @property
    def restored(self) -> bool:
        return self.verdict is PatchVerdict.RESTORED

    @property
    def still_diverged(self) -> list[str]:
        """Steps after the first patched one that still diverge with the patch."""
        return [s.name for s in self.downstream if s.diverged_after]

    @property
    def diverged_before(self) -> list[str]:
        """Steps after the first patched one (and not patched) that diverged without the patch."""
        return [s.name for s in self.downstream if s.diverged_before]

    @property
    def output_restored(self) -> bool | None:
        """Whether the layer output (the last step) is within its threshold with the patch; None when
        the steps could not be patched."""
        steps = sorted(self.patched + self.downstream, key=lambda s: s.index)
        return None if not steps else not steps[-1].diverged_after


@dataclass(frozen=True)
class PatchConfirmation(JsonRecord):
    """Activation patching of one diverged configuration: `attempts[0]` patches its first divergent
    step alone (the verdict on it); each further attempt adds the first step that still diverged,
    until one restores the layer, a step cannot be patched, or the step budget is spent."""

    attempts: tuple[PatchResult, ...]

    @property
    def first(self) -> PatchResult:
        return self.attempts[0]

    @property
    def verdict(self) -> PatchVerdict:
        """The verdict on the first divergent step alone."""
        return self.first.verdict

    @property
    def restoring_steps(self) -> tuple[str, ...] | None:
        """The steps whose patching together restores the layer (the first divergent step alone when
        it does), or None when no attempt restored it."""
        last = self.attempts[-1]
        return last.steps if last.restored else None

    def in_mode(self, mode: str) -> PatchConfirmation:
        """The same confirmation for another mode that provably runs the same computation (a twin mode,
        `TriageSession.twin_mode`): every number is the same, only the mode differs."""
        return PatchConfirmation(tuple(replace(attempt, mode=mode) for attempt in self.attempts))


def _recovery(index: int, before: StepDiff, patched_run, reference, floor: dict, factor: float) -> StepRecovery:
    rel_err, step_floor, limit, diverged = step_verdict(patched_run.records[before.name], reference, floor, factor)
    return StepRecovery(
        name=before.name,
        index=index,
        rel_err_before=before.rel_err,
        rel_err_after=rel_err,
        floor=step_floor,
        threshold=limit,
        diverged_before=before.diverged,
        diverged_after=diverged,
    )


def _diff_of(session, scen: Scenario, tp: int, mode: str, diff: RunDiff | None, factor: float) -> RunDiff:
    return session.diff(scen, tp, mode, factor) if diff is None else diff


def patch_steps(
    session,
    scenario: Scenario | str,
    tp: int,
    mode: str,
    steps: Sequence[str] | None = None,
    diff: RunDiff | None = None,
    factor: float = DIVERGENCE_FACTOR,
) -> PatchResult:
    """Run (tp, mode) under `scenario` on the TriageSession `session` with the outputs of `steps` taken from
    the session's reference run, and say whether every later step recovers (module docstring).

    `steps` defaults to the first divergent step of `diff`, the configuration's comparison with the
    reference (computed when not given; a triage passes the one it has). The session's reference run,
    noise floors, loaded linears and GEMM results are reused: this costs about one more layer run.
    """
    scen = scenario_of(scenario)
    diff = _diff_of(session, scen, tp, mode, diff, factor)
    if steps is None:
        if diff.first_divergent_step is None:
            raise ValueError(
                f"{scen.name} at TP{tp} {mode} does not diverge from the reference: there is no first "
                "divergent step to patch; name the steps"
            )
        steps = [diff.first_divergent_step]
    names = [s.name for s in diff.steps]
    unknown = [step for step in steps if step not in names]
    if unknown:
        raise ValueError(f"steps {unknown} are not among the compared steps of TP{tp} {mode}: {names}")
    steps = tuple(sorted(dict.fromkeys(steps), key=names.index))
    reference = session.reference(tp, mode)
    common = dict(tp=tp, mode=mode, scenario=scen.name, reference=reference.scenario, steps=steps, factor=factor)
    try:
        patched_run = session.patched_run(scen, tp, mode, Patch(reference, steps))
    except StepNotReplaceable:
        return PatchResult(**common, verdict=PatchVerdict.NOT_PATCHABLE, patched=(), downstream=())
    # Steps before the first patched one ran exactly as before (same inputs, same kernels): only the
    # patched steps and those after them are judged again.
    floor, first = session.floor(tp, mode), names.index(steps[0])
    judged = [(i, before) for i, before in enumerate(diff.steps) if i >= first]
    patched = tuple(_recovery(i, b, patched_run, reference, floor, factor) for i, b in judged if b.name in steps)
    downstream = tuple(_recovery(i, b, patched_run, reference, floor, factor) for i, b in judged if b.name not in steps)
    restored = not any(s.diverged_after for s in downstream)
    verdict = PatchVerdict.RESTORED if restored else PatchVerdict.NOT_RESTORED
    return PatchResult(**common, verdict=verdict, patched=patched, downstream=downstream)


def confirm_by_patching(
    session,
    scenario: Scenario | str,
    tp: int,
    mode: str,
    diff: RunDiff | None = None,
    factor: float = DIVERGENCE_FACTOR,
    max_steps: int = 4,
) -> PatchConfirmation:
    """Patch the first divergent step of (tp, mode) under `scenario`; while later steps still diverge,
    patch the first of them as well, up to `max_steps` patched steps (`PatchConfirmation`)."""
    if max_steps < 1:
        raise ValueError(f"max_steps={max_steps} must be >= 1")
    scen = scenario_of(scenario)
    diff = _diff_of(session, scen, tp, mode, diff, factor)
    attempts = [patch_steps(session, scen, tp, mode, diff=diff, factor=factor)]
    while attempts[-1].verdict is PatchVerdict.NOT_RESTORED and len(attempts[-1].steps) < max_steps:
        steps = attempts[-1].steps + (attempts[-1].still_diverged[0],)
        attempts.append(patch_steps(session, scen, tp, mode, steps, diff=diff, factor=factor))
    return PatchConfirmation(tuple(attempts))
