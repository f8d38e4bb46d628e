"""Activation patching in words and as a table: what the HTML report and the terminal say about it.

Analysis hands over typed data (`PatchConfirmation`: per attempt the patched steps and every later
step's rel_err before and after, with its threshold); this module is the one place that turns it into
a sentence and into table rows, so the report and the terminal never say different things.

The sentence names steps by name, except the layer's last step, which is "the output": what a reader
cares about is whether the layer's result comes back, and its step name (all_reduce, wo_b, ...)
depends on the model and TP size.

    patching_sentence(report.confirmation(4, "decode"))
    # 'patching absorb_uk alone restores attention but leaves absorb_uv, o_proj and the output diverged
    #  (a second fault downstream, or an earlier one below the noise floor); patching absorb_uk and
    #  absorb_uv restores the output'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..triage.patching import PatchConfirmation, PatchResult, PatchVerdict
from ..triage.report import PATCHING_SINCE
from .culprits import configs_label

# Why a step cannot be patched, in the words of `triage.patching`: its readers take other tensors.
_CANNOT_PATCH = "cannot be patched: the steps after it read more than its recorded output"


def _listed(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def _output_step(attempt: PatchResult) -> str | None:
    """The layer's last step as the attempt judged it (None when nothing was judged)."""
    judged = sorted(attempt.patched + attempt.downstream, key=lambda s: s.index)
    return judged[-1].name if judged else None


def _words(names: Iterable[str], output: str | None) -> str:
    return _listed(["the output" if name == output else name for name in names])


def _tail(confirmation: PatchConfirmation, output: str | None) -> str:
    """What the attempts after the first found: which steps together restore, or why none did."""
    if len(confirmation.attempts) == 1:
        return ""
    last = confirmation.attempts[-1]
    if last.verdict is PatchVerdict.RESTORED:
        diverged = {s.name for s in confirmation.first.downstream if s.diverged_before}
        restored = "the output" if output in diverged else "every later step"
        return f"; patching {_listed(list(last.steps))} restores {restored}"
    if last.verdict is PatchVerdict.NOT_PATCHABLE:
        return f"; {last.steps[-1]} {_CANNOT_PATCH}"
    return f"; patching {_listed(list(last.steps))} still leaves {_words(last.still_diverged, output)} diverged"


def patching_sentence(confirmation: PatchConfirmation) -> str:
    """One configuration's patching check in one sentence: whether patching its first divergent step
    from the reference restores everything after it (the fault is inside that step), and where not,
    what still diverges and which steps patched together restore the layer."""
    first = confirmation.first
    steps = _listed(list(first.steps))
    if first.verdict is PatchVerdict.NOT_PATCHABLE:
        return f"{steps} {_CANNOT_PATCH}, so patching cannot tell whether the fault is inside it"
    output = _output_step(first)
    recovered = [s.name for s in first.downstream if s.diverged_before and not s.diverged_after]
    if first.verdict is PatchVerdict.RESTORED:
        if not first.downstream:
            return f"{steps} is the layer's last step: there is nothing after it for patching to restore"
        if not recovered:
            return (
                f"patching {steps} from the reference keeps every later step within its threshold: "
                f"the fault is inside {steps}"
            )
        return f"patching {steps} from the reference restores {_words(recovered, output)}: the fault is inside {steps}"
    alone = f"{steps} alone" if len(first.steps) == 1 else steps
    restores = f"restores {_words(recovered, output)} but " if recovered else ""
    return (
        f"patching {alone} {restores}leaves {_words(first.still_diverged, output)} diverged (a second fault "
        f"downstream, or an earlier one below the noise floor){_tail(confirmation, output)}"
    )


def not_recorded(report) -> str:
    """Why a TriageReport has no patching check of a diverged configuration, as far as it can tell."""
    if report.source_schema < PATCHING_SINCE:
        return (
            f"not recorded: this report was read from a schema {report.source_schema} file, written before "
            "reports kept activation patching"
        )
    return "not recorded (the triage ran without patching, or its report was written before reports kept it)"


@dataclass(frozen=True)
class PatchingLine:
    """What patching says about a set of configurations whose checks read the same: `text` is the
    sentence (`patching_sentence`), or why there is none when `recorded` is False."""

    configs: tuple[tuple[int, str], ...]
    text: str
    recorded: bool = True

    @property
    def label(self) -> str:
        return configs_label(self.configs)

    @property
    def line(self) -> str:
        """'TP4, TP8 decode: patching absorb_uk alone leaves ...'."""
        return f"{self.label}: {self.text}"


def patching_lines(report, configs: Iterable[tuple[int, str]] | None = None) -> list[PatchingLine]:
    """The patching checks of `configs` in the TriageReport `report` (default: every diverged
    configuration, in run order), one line per distinct sentence, in first-seen order."""
    if configs is None:
        configs = [(r.tp, r.mode) for r in report.diverged_runs]
    groups: dict[tuple[str, bool], list[tuple[int, str]]] = {}
    for tp, mode in configs:
        confirmation = report.confirmation(tp, mode)
        key = (not_recorded(report), False) if confirmation is None else (patching_sentence(confirmation), True)
        groups.setdefault(key, []).append((tp, mode))
    return [PatchingLine(tuple(members), text, recorded) for (text, recorded), members in groups.items()]


@dataclass(frozen=True)
class RecoveryRow:
    """One step of a patching check's table: its threshold, its rel_err before patching, and per
    attempt its rel_err with that attempt's steps patched (None where the attempt could not patch).
    ``patched[i]`` says whether the step itself was substituted in attempt i."""

    step: str
    threshold: float | None
    before: float
    diverged_before: bool
    after: tuple[float | None, ...]
    diverged_after: tuple[bool | None, ...]
    patched: tuple[bool, ...]


def recovery_columns(confirmation: PatchConfirmation) -> list[str]:
    """The table's attempt columns: 'absorb_uk patched', 'absorb_uk, absorb_uv patched'."""
    return [f"{', '.join(attempt.steps)} patched" for attempt in confirmation.attempts]


def recovery_rows(confirmation: PatchConfirmation) -> list[RecoveryRow]:
    """Every step from the first patched one to the layer output, in layer order (empty when the first
    divergent step could not be patched: no step was run again)."""
    first = confirmation.first
    rows = []
    for step in sorted(first.patched + first.downstream, key=lambda s: s.index):
        after, diverged, patched = [], [], []
        for attempt in confirmation.attempts:
            seen = {s.name: s for s in attempt.patched + attempt.downstream}.get(step.name)
            after.append(None if seen is None else seen.rel_err_after)
            diverged.append(None if seen is None else seen.diverged_after)
            patched.append(step.name in attempt.steps)
        rows.append(
            RecoveryRow(
                step.name,
                step.threshold,
                step.rel_err_before,
                step.diverged_before,
                tuple(after),
                tuple(diverged),
                tuple(patched),
            )
        )
    return rows
