"""A live TriageResult's report: the plain data it is drawn and saved from (`TriageResult.report`)."""

from __future__ import annotations

from collections.abc import Iterable

from ..diff import block_errors
from .block_errors import BlockErrors
from .run_report import RunReport
from .triage_report import TriageReport

# Columns per block of a block-error matrix: one FP8 activation-quantization group (1x128) and one
# weight block (128x128) wide, so a misread scale or weight shows up as whole blocks.
BLOCK = 128


def report_of(result, block_steps: Iterable[tuple[int, str, str | None]] = ()) -> TriageReport:
    """The TriageReport of `result`, keeping the block errors of the first divergent step of every
    diverged configuration, plus those of `block_steps` ((tp, mode, step); a step of None is that
    configuration's default step)."""
    runs = [RunReport.of(c) for c in result.configs]
    wanted = [(r.tp, r.mode, r.first_divergent_step) for r in runs if r.diverged and r.first_divergent_step]
    for tp, mode, step in block_steps:
        name = step or result.default_step(tp, mode)
        result.config(tp, mode).diff.step(name)  # KeyError naming the steps when `name` is not one
        wanted.append((tp, mode, name))
    blocks = []
    for tp, mode, name in dict.fromkeys(wanted):
        diff = result.config(tp, mode).diff
        output, reference = diff.run.records[name].output, diff.reference.records[name].output
        blocks.append(BlockErrors.of(tp, mode, name, output.shape, BLOCK, block_errors(output, reference, BLOCK)))
    return TriageReport(
        model=result.model,
        platform=result.platform,
        scenario=result.scenario,
        tokens=result.tokens,
        device=result.device,
        runs=runs,
        culprits=list(result.culprits),
        seed=result.seed,
        tp_sizes=tuple(result.tp_sizes),
        modes=tuple(result.modes),
        elapsed_s=result.elapsed_s,
        provenance=result.provenance,
        bisection=result.bisection,
        unresolved=[(tp, mode) for tp, mode in result.unresolved],
        block_errors=blocks,
        patching=dict(result.patching),
        profile=result.profile,
        positions=result.positions,
        caveats=list(result.caveats),
    )
