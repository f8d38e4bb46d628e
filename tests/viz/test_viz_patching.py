"""Activation patching in words and as table rows, from constructed typed checks (no layer runs)."""

from __future__ import annotations

import dataclasses
import math

from mla_debug.triage import PatchConfirmation, PatchResult, PatchVerdict, StepRecovery
from mla_debug.triage.report import RunReport, TriageReport
from mla_debug.viz.patching import patching_lines, patching_sentence, recovery_columns, recovery_rows

# Absorbed decode's steps from absorb_uk on, as the layer orders them; all_reduce is the output.
ORDER = ("absorb_uk", "attention", "absorb_uv", "o_proj", "all_reduce")
THRESHOLD = 0.2


def _step(name: str, before: float, after: float) -> StepRecovery:
    return StepRecovery(
        name, ORDER.index(name), before, after, THRESHOLD / 4, THRESHOLD, before > THRESHOLD, after > THRESHOLD
    )


def _attempt(steps: tuple[str, ...], errors: dict[str, tuple[float, float]], verdict=None, tp=4) -> PatchResult:
    """One attempt patching `steps`; `errors` gives (before, after) per judged step from the first patched one."""
    judged = [_step(name, *errors[name]) for name in ORDER[ORDER.index(steps[0]) :]]
    patched = tuple(s for s in judged if s.name in steps)
    downstream = tuple(s for s in judged if s.name not in steps)
    if verdict is None:
        verdict = PatchVerdict.NOT_RESTORED if any(s.diverged_after for s in downstream) else PatchVerdict.RESTORED
    return PatchResult(tp, "decode", "vllm-pr51692", "reference", steps, verdict, patched, downstream)


def _not_patchable(steps: tuple[str, ...], tp=4) -> PatchResult:
    return PatchResult(tp, "decode", "vllm-pr51692", "reference", steps, PatchVerdict.NOT_PATCHABLE, (), ())


# Before patching every step from absorb_uk on is far above its threshold.
BEFORE = {"absorb_uk": 3.3, "attention": 0.77, "absorb_uv": 4.5, "o_proj": 4.4, "all_reduce": 4.4}


def _errors(**after: float) -> dict[str, tuple[float, float]]:
    return {name: (BEFORE[name], after.get(name, 0.0)) for name in ORDER}


ABSORB_UK_ALONE = _attempt(("absorb_uk",), _errors(attention=2e-5, absorb_uv=4.2, o_proj=4.1, all_reduce=4.1))
BOTH_ABSORBS = _attempt(("absorb_uk", "absorb_uv"), _errors(attention=2e-5))


def test_a_restoring_patch_puts_the_fault_inside_the_step():
    check = PatchConfirmation((_attempt(("absorb_uk",), _errors(attention=2e-5, o_proj=1e-4, all_reduce=1e-4)),))
    assert check.verdict is PatchVerdict.RESTORED
    assert patching_sentence(check) == (
        "patching absorb_uk from the reference restores attention, absorb_uv, o_proj and the output: "
        "the fault is inside absorb_uk"
    )


def test_a_restoring_patch_with_nothing_diverged_after_it_says_so():
    quiet = {name: (BEFORE["absorb_uk"] if name == "absorb_uk" else 0.01, 0.0) for name in ORDER}
    check = PatchConfirmation((_attempt(("absorb_uk",), quiet),))
    assert patching_sentence(check) == (
        "patching absorb_uk from the reference keeps every later step within its threshold: "
        "the fault is inside absorb_uk"
    )
    last = PatchConfirmation((_attempt(("all_reduce",), _errors()),))
    assert (
        patching_sentence(last)
        == "all_reduce is the layer's last step: there is nothing after it for patching to restore"
    )


def test_a_patch_that_does_not_restore_names_what_still_diverges_and_what_restores():
    check = PatchConfirmation((ABSORB_UK_ALONE, BOTH_ABSORBS))
    assert check.verdict is PatchVerdict.NOT_RESTORED and check.restoring_steps == ("absorb_uk", "absorb_uv")
    assert patching_sentence(check) == (
        "patching absorb_uk alone restores attention but leaves absorb_uv, o_proj and the output diverged "
        "(a second fault downstream, or an earlier one below the noise floor); "
        "patching absorb_uk and absorb_uv restores the output"
    )


def test_a_patch_that_does_not_restore_and_no_later_one_that_does():
    budget_spent = PatchConfirmation((ABSORB_UK_ALONE, _attempt(("absorb_uk", "absorb_uv"), _errors(all_reduce=3.0))))
    assert budget_spent.restoring_steps is None
    assert patching_sentence(budget_spent).endswith(
        "; patching absorb_uk and absorb_uv still leaves the output diverged"
    )
    blocked = PatchConfirmation((ABSORB_UK_ALONE, _not_patchable(("absorb_uk", "absorb_uv"))))
    assert patching_sentence(blocked).endswith(
        "; absorb_uv cannot be patched: the steps after it read more than its recorded output"
    )
    alone = PatchConfirmation((ABSORB_UK_ALONE,))  # max_steps=1: no further attempt
    assert patching_sentence(alone).endswith("(a second fault downstream, or an earlier one below the noise floor)")


def test_a_step_that_cannot_be_patched_says_patching_cannot_tell():
    check = PatchConfirmation((_not_patchable(("q_norm",)),))
    assert check.verdict is PatchVerdict.NOT_PATCHABLE
    assert patching_sentence(check) == (
        "q_norm cannot be patched: the steps after it read more than its recorded output, so patching cannot "
        "tell whether the fault is inside it"
    )
    assert recovery_rows(check) == []


def test_the_table_rows_hold_every_attempt_per_step():
    check = PatchConfirmation((ABSORB_UK_ALONE, BOTH_ABSORBS))
    assert recovery_columns(check) == ["absorb_uk patched", "absorb_uk, absorb_uv patched"]
    rows = recovery_rows(check)
    assert [r.step for r in rows] == list(ORDER)
    uv = rows[2]
    assert (uv.before, uv.after, uv.diverged_after, uv.patched) == (4.5, (4.2, 0.0), (True, False), (False, True))
    assert rows[0].patched == (True, True) and rows[-1].threshold == THRESHOLD
    blocked = recovery_rows(PatchConfirmation((ABSORB_UK_ALONE, _not_patchable(("absorb_uk", "absorb_uv")))))
    assert blocked[2].after == (4.2, None) and blocked[2].diverged_after == (True, None)


def _report(patching: dict, source_schema: int = 3) -> TriageReport:
    runs = [RunReport(tp, "decode", "diverged", "absorb_uk", []) for tp in (2, 4, 8)]
    return TriageReport(
        "mini", "mi355x", "vllm-pr51692", 8, "cpu", runs, patching=patching, source_schema=source_schema
    )


def test_configurations_whose_checks_read_the_same_share_one_line():
    at8 = PatchConfirmation(
        tuple(
            dataclasses.replace(
                a,
                tp=8,
                downstream=tuple(dataclasses.replace(s, rel_err_after=s.rel_err_after * 1.01) for s in a.downstream),
            )
            for a in (ABSORB_UK_ALONE, BOTH_ABSORBS)
        )
    )
    restored = PatchConfirmation((_attempt(("absorb_uk",), _errors(attention=1e-5), tp=2),))
    report = _report(
        {(2, "decode"): restored, (4, "decode"): PatchConfirmation((ABSORB_UK_ALONE, BOTH_ABSORBS)), (8, "decode"): at8}
    )
    lines = patching_lines(report)
    assert [(line.configs, line.recorded) for line in lines] == [
        (((2, "decode"),), True),
        (((4, "decode"), (8, "decode")), True),
    ]
    assert lines[1].line.startswith("TP4, TP8 decode: patching absorb_uk alone restores attention but leaves")
    assert [line.configs for line in patching_lines(report, [(8, "decode")])] == [((8, "decode"),)]


def test_a_report_without_checks_says_they_were_not_recorded():
    (line,) = patching_lines(_report({}))
    assert line.configs == ((2, "decode"), (4, "decode"), (8, "decode")) and not line.recorded
    assert line.text.startswith("not recorded (the triage ran without patching")
    (older,) = patching_lines(_report({}, source_schema=2))
    assert older.text.startswith("not recorded: this report was read from a schema 2 file")


def test_an_infinite_error_still_makes_a_sentence_and_rows():
    broken = _attempt(("absorb_uk",), {**_errors(), "o_proj": (math.inf, math.inf), "all_reduce": (4.4, math.inf)})
    check = PatchConfirmation((broken,))
    assert patching_sentence(check).startswith(
        "patching absorb_uk alone restores attention and absorb_uv but leaves o_proj and the output diverged"
    )
    assert [r.after for r in recovery_rows(check)][3:] == [(math.inf,), (math.inf,)]
