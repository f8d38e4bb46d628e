"""Capture diffs and explanations in words, and the capture diff as a heatmap.

    diff_lines(diff)              # one line per step, then one per weight whose bytes differ
    explanation_lines(expl)       # one sentence per explained, unexplained or untestable step
    capture_heatmap(diff)         # rows steps, columns b's ranks and the gathered output

The data are `explain.diff.CaptureDiff` and `explain.explain.CaptureExplanation`;
plotly is imported inside `capture_heatmap` only.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from ..explain.diff import (
    ByteRelation,
    CaptureDiff,
    Difference,
    LayoutBase,
    RankLayout,
    StepComparison,
    StepStatus,
    StepVerdict,
)
from ..explain.explain import Candidate, CaptureExplanation, DivergenceSource, Outcome, StepExplanation
from ..explain.stories import StoryKind
from ..explain.truth import Truth, TruthSource
from ..explain.untestable import Untestable
from ._cells import COLOURSCALE, cell_outline, left_title, log10_grid, log_ticks, sci

if TYPE_CHECKING:
    import plotly.graph_objects as go

STORY_WORDS = {
    StoryKind.CORRECT: "every operand read as written",
    StoryKind.WEIGHT_RELAID_READ_PLAIN: "the relaid weight bytes read as a plain matrix (a direct reader saw a relaid weight)",
    StoryKind.WEIGHT_SHUFFLED_TWICE: "the weight shuffled twice and un-shuffled once by its preshuffle-aware reader",
    StoryKind.WEIGHT_PLAIN_READ_AS_SHUFFLED: "the plain weight bytes un-shuffled by a preshuffle-aware reader",
    StoryKind.ACT_SCALE_ROW_READ_AS_COL: "the activation scale written row-major and read column-major",
    StoryKind.ACT_SCALE_COL_READ_AS_ROW: "the activation scale written column-major and read row-major",
    StoryKind.WEIGHT_SCALE_OTHER_ORDER: "the weight's block scale read in another order than it holds",
    StoryKind.DERIVED_FROM_RELAID: "derived from kv_b_proj's relaid bytes read directly",
    StoryKind.WEIGHT_VNNI_READ_PLAIN: "the VNNI-packed weight bytes read as a plain matrix",
    StoryKind.WEIGHT_PLAIN_READ_AS_VNNI: "the plain weight bytes un-packed by a VNNI-aware reader",
    StoryKind.SCALE_CODES_AS_VALUES: "the E8M0 scale codes used as numbers (code 120, meaning 2^-7, read as 120.0)",
    StoryKind.PACKED_SCALES_AS_VALUES: "the packed ue8m0 scale words read as fp32 values",
    StoryKind.SCALE_TRUNCATED: "the non-power-of-two scales cut to their exponent (the power of two below) by a ue8m0 packer",
    StoryKind.UE8M0_MANTISSA_LEAK: "the scales packed to ue8m0 without masking, mantissa bits spilling into the neighbouring codes",
    StoryKind.GROUPED_SCALE_TOKEN_READ_AS_GROUP: "the grouped GEMM's scales written token-major (row t*G+g) and read group-major (row g*T+t)",
}


UNTESTABLE_WORDS = {
    Untestable.NOT_RECOMPUTED: "the stories recompute linears, norms and derived weights, not this op",
    Untestable.MISSING_TENSORS: "the capture lacks what the test needs",
    Untestable.KV_CONTEXT_MISSING: "the call attended to keys of earlier positions that the capture does not hold "
    "(capture the call with the prompt's call inside the same md.capture block)",
    Untestable.KV_CONTEXT_UNKNOWN: "the capture does not say which keys its call attended to, and its positions do "
    "not start at 0 (an older capture of a decode call?)",
    Untestable.MULTIPLE_SEQUENCES: "its rows belong to more than one sequence (positions repeat), which the reference "
    "would attend across",
    Untestable.SCALE_ROWS: "an activation scale kept whole whose rows do not match the kept tokens",
    Untestable.NOT_RECORDED: "the engine keeps it where the capture could not record it",
    Untestable.PER_RANK_ONLY: "each rank recorded its own value, with no TP-independent form to compare",
}

TRUTH_WORDS = {
    TruthSource.CHECKPOINT: "the checkpoint given",
    TruthSource.SIDES_AGREE: "both captures' own weights (they hold the same bytes; no checkpoint given, so a "
    "defect both share would not show)",
    TruthSource.SIDE_A: "side a's own weights (no checkpoint given; b's are a re-layout of them or absent)",
    TruthSource.SIDE_B: "side b's own weights (no checkpoint given; a's are a re-layout of them or absent)",
    TruthSource.CAPTURE: "the capture's own weights (no checkpoint given: a defect in its weight bytes would not show)",
    TruthSource.OTHER_CAPTURE: "another capture's own weights (given in place of the checkpoint)",
    TruthSource.UNDECIDED: "undecided",
    TruthSource.NONE: "none (no checkpoint, and no capture holds its weights in checkpoint layout)",
    TruthSource.UNRECORDED: "not recorded (a result saved by an older mla_debug)",
}


def truth_text(truth: Truth) -> str:
    """Which weights the verdicts were judged against, in words."""
    if truth.source is TruthSource.UNDECIDED:
        return (
            f"undecided: the captures hold different {', '.join(truth.disputed)} and no checkpoint says which is "
            "right; pass --checkpoint (checkpoint=) to decide"
        )
    return TRUTH_WORDS[truth.source]


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def relation_text(rank: RankLayout, base: LayoutBase) -> str:
    """How one rank's bytes relate to the base, in words."""
    of = {
        LayoutBase.CHECKPOINT: "the checkpoint's",
        LayoutBase.OTHER_SIDE: "the other side's",
        LayoutBase.SIDE_A_VNNI_UNPACKED: "side a's un-packed",
    }.get(base, f"side {base.value}'s")
    if rank.relation is ByteRelation.VNNI_PACKED:
        return f"{of} bytes VNNI-packed"
    if rank.relation is ByteRelation.SAME:
        alias = " (also 2 shuffles at this 256-byte row)" if 2 in rank.same_bytes_as else ""
        return f"{of} bytes{alias}"
    if rank.relation is ByteRelation.SHUFFLED:
        return f"{of} bytes shuffled {rank.shuffle_layout} {_times(rank.shuffles)}"
    if rank.relation is ByteRelation.SCALE_ORDER:
        shape = " in the transposed shape" if rank.transposed else ""
        return f"{of} scale values in {'/'.join(s.name for s in rank.scale_layouts)} order{shape}"
    if rank.relation is ByteRelation.SHAPE:
        return "another shape or element size"
    return "other values"


def _ranks_text(ranks: tuple[RankLayout, ...], base: LayoutBase) -> str:
    groups: dict[str, list[int]] = {}
    for r in ranks:
        groups.setdefault(relation_text(r, base), []).append(r.rank)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"rank {','.join(map(str, rs))}: {text}" for text, rs in groups.items())


def weight_lines(diff: CaptureDiff) -> list[str]:
    """One line per weight whose bytes differ between the sides (layout or value)."""
    lines = []
    for w in diff.weights:
        if w.difference is Difference.NONE:
            continue
        what = "in layout (same values, other order)" if w.difference is Difference.LAYOUT else "in value"
        lines.append(
            f"{w.name} differs {what}: a (TP{diff.a.tp_size}) holds {_ranks_text(w.side('a'), w.base)}; "
            f"b (TP{diff.b.tp_size}) holds {_ranks_text(w.side('b'), w.base)}"
        )
    return lines


def _ranks_words(label: str, errors: tuple[float, ...]) -> str:
    return f"{label} per rank " + ", ".join(sci(e) for e in errors)


def step_line(step: StepComparison) -> str:
    """One compared step: its error, what the layer inputs' difference explains of it, and the verdict."""
    if step.status is StepStatus.SHAPE_DIFFERS:
        return f"{step.step}: recorded in shapes {step.shape_a} and {step.shape_b}; not compared"
    if step.status is StepStatus.ONLY_IN_A:
        return f"{step.step}: only in a"
    if step.status is StepStatus.ONLY_IN_B:
        return f"{step.step}: only in b"
    if step.status is StepStatus.UNTESTABLE:
        return f"{step.step}: not compared - {UNTESTABLE_WORDS[step.untestable]}"
    limit = f" (threshold {sci(step.threshold)})" if step.threshold is not None else ""
    inherited = ""
    if step.inherited:
        inherited = f"; the layer input's difference explains {sci(step.inherited)} of it, leaving {sci(step.residual)}"
    verdict = {
        StepVerdict.AGREES: "ok",
        StepVerdict.INHERITED: "ok: inherited from the layer input",
        StepVerdict.DIVERGED: "DIVERGED",
        StepVerdict.UNJUDGED: "not judged (no noise floor, or a layer-input difference with no truth to propagate it)",
        None: "DIVERGED" if step.diverged else "ok",
    }[step.verdict]
    ranks = ""
    if step.diverged and (step.rank_errors or step.rank_errors_a):
        parts = [_ranks_words(label, errors) for label, errors in (("a", step.rank_errors_a), ("b", step.rank_errors)) if errors]
        ranks = "; " + "; ".join(parts)
    return f"{step.step}: rel_err {sci(step.rel_err)}{limit}{inherited} {verdict}{ranks}"


def layer_input_line(diff: CaptureDiff) -> str | None:
    """What the two sides' layer inputs differ by (None for a result that did not record it)."""
    found = diff.layer_input
    if found is None:
        return None
    if found.identical and found.context_identical:
        return "layer input: the same bytes on both sides"
    if found.identical:
        return "layer input: the same bytes on both sides; the earlier rows its keys came from differ"
    return (
        f"layer input: differs between the sides by rel_err {sci(found.rel_err)} (max |diff| {sci(found.max_abs)}), "
        "inherited from the layers before; every step is judged after taking away what that difference explains"
    )


def suspect_lines(diff: CaptureDiff) -> list[str]:
    """The ranks whose weight bytes are not the truth's, named by side and rank."""
    if not diff.suspects or diff.truth.source is TruthSource.UNDECIDED:
        return []
    found: dict[tuple[str, int], list[str]] = {}
    for name, rank in diff.suspects:
        found.setdefault((rank.side, rank.rank), []).append(name)
    return [
        f"suspect: side {side} ({'baseline' if side == 'a' else 'under test'}) rank {rank}: {', '.join(names)}"
        for (side, rank), names in sorted(found.items())
    ]


def diff_lines(diff: CaptureDiff) -> list[str]:
    """The diff in words: the sides and the truth, the layer input, each compared step, then the weights
    whose bytes differ and the ranks they point at."""
    head = (
        f"a (baseline): {diff.a.engine} TP{diff.a.tp_size}, b: {diff.b.engine} TP{diff.b.tp_size}, layer {diff.b.layer}, "
        f"{diff.b.tokens} tokens, mode {diff.b.mode or 'unknown'}; weights judged against {truth_text(diff.truth)}"
    )
    lines = [head]
    line = layer_input_line(diff)
    if line is not None:
        lines.append(line)
    lines += [step_line(s) for s in diff.steps if s.status is not StepStatus.ONLY_IN_A]
    lines += weight_lines(diff) or ["no weight or scale differs between the sides"]
    lines += suspect_lines(diff)
    if diff.floor_source is None:
        lines.append("no noise floor (no weights to compute it from): only non-finite outputs count as diverged")
    lines += list(diff.notes)
    return lines


def _reading_words(candidate: Candidate) -> str:
    return " and ".join(STORY_WORDS[k] for k in candidate.kinds)


def _held_words(explanation: StepExplanation) -> str:
    shuffles = {h.shuffles for h in explanation.held if h.relation is ByteRelation.SHUFFLED}
    packed = any(h.relation is ByteRelation.VNNI_PACKED for h in explanation.held)
    if (not shuffles and not packed) or explanation.tensor is None:
        return ""
    module = (explanation.tensor or "").split(".")[0]
    if explanation.tensor in ("W_UK", "W_UV"):
        module = "kv_b_proj"
    if packed:
        return f"{module}'s bytes are its checkpoint bytes VNNI-packed; "
    counts = "/".join(_times(s) for s in sorted(shuffles))
    return f"{module}'s bytes are its checkpoint bytes shuffled (16, 16) {counts}; "


def _on_ranks(ranks: tuple[int, ...], of: int) -> str:
    if len(ranks) == of:
        return "on every rank"
    return ("on rank " if len(ranks) == 1 else "on ranks ") + ", ".join(map(str, ranks))


def _input_words(e: StepExplanation) -> str:
    return "the layer input" if e.inherited_from == "layer.input" else f"its input, {e.inherited_from}'s output"


# Where a diverged step's divergence came from, in words; {input} names the step's input (`_input_words`).
_SOURCE_WORDS = {
    DivergenceSource.LAYER_INPUT: (
        " - it differs from the other side only by what the layer input's difference explains"
    ),
    DivergenceSource.EARLIER_STEP: " - its divergence comes from {input}",
    DivergenceSource.OTHER_SIDE: (
        " - {input} agrees between the sides (its difference taken away), so the divergence is the other side's"
    ),
    DivergenceSource.UNKNOWN: " - its divergence comes from {input} (not compared) or from the other side",
}


def _source_words(e: StepExplanation) -> str:
    return _SOURCE_WORDS.get(e.source, "").format(input=_input_words(e))


def _assumed(e: StepExplanation) -> str:
    return " (if the weights it was judged against are right)" if e.assumes_weights else ""


def explanation_sentence(e: StepExplanation) -> str:
    """One sentence for one step or derived weight."""
    what = e.tensor if e.tensor in ("W_UK", "W_UV") else f"the observed {e.step} output"
    if e.outcome is Outcome.UNTESTABLE:
        why = UNTESTABLE_WORDS.get(e.untestable, UNTESTABLE_WORDS[Untestable.NOT_RECOMPUTED])
        lacking = f": {', '.join(e.missing)}" if e.missing else ""
        detail = f" ({e.detail})" if e.detail else ""
        return f"{e.step}: not tested - {why}{lacking}{detail}"
    if e.outcome is Outcome.CORRECT_FROM_INPUTS:
        c = e.correct
        err = f" (rel err {sci(c.rel_err)})" if c is not None else ""
        return (
            f"{e.step}: {what} is what its captured inputs give with {STORY_WORDS[StoryKind.CORRECT]}{err}"
            f"{_assumed(e)}{_source_words(e)}"
        )
    n = len(e.ranks)
    if e.outcome is Outcome.NO_STORY:
        best = e.best
        tried = f"; the closest, {_reading_words(best)}, is off by rel err {sci(best.rel_err)}" if best else ""
        where = f" {_on_ranks(e.failing_ranks, n)}" if e.ranks and len(e.failing_ranks) < n else ""
        return f"{e.step}: no known story explains this step{where}{tried}{_assumed(e)}"
    best, correct = e.best, e.correct
    by_rank = e.stories_by_rank
    if len(set(by_rank.values())) > 1:
        stories = "; ".join(f"rank {r}: {' and '.join(STORY_WORDS[k] for k in kinds)}" for r, kinds in by_rank.items())
        return f"{e.step}: {_held_words(e)}{what} is explained rank by rank - {stories}{_assumed(e)}"
    where = f" {_on_ranks(e.story_ranks, n)}" if e.ranks else ""
    story = " and ".join(STORY_WORDS[k] for k in e.story)
    err = next((r.rel_err for r in e.ranks if r.outcome is Outcome.EXPLAINED), best.rel_err if best else float("nan"))
    rest = ""
    if correct is not None:
        rest = f", not with {STORY_WORDS[StoryKind.CORRECT]} (rel err {sci(correct.rel_err)})"
        if e.ranks and len(e.story_ranks) < n:
            rest += "; the other ranks are what their inputs give"
    equals = "equals" if e.tensor in ("W_UK", "W_UV") else "equals the reference computed with"
    return f"{e.step}: {_held_words(e)}{what}{where} {equals} {story} (rel err {sci(err)}){rest}{_assumed(e)}"


def explanation_lines(explanation: CaptureExplanation) -> list[str]:
    """One sentence per explanation; then what the whole comes to - never "every step is what its inputs
    give" while a step could not be tested, and always against which weights."""
    lines = [explanation_sentence(e) for e in explanation.explanations]
    untested = explanation.untested
    if not explanation.stories and not explanation.unexplained:
        if untested:
            names = ", ".join(e.step for e in untested)
            lines.append(f"no layout story among the steps tested; not tested: {names}")
        else:
            lines.append("no layout story: every step and derived weight tested is what its captured inputs give")
    if explanation.truth.assumed and explanation.truth.source is not TruthSource.UNRECORDED:
        lines.append(
            f"weights judged against {truth_text(explanation.truth)}; pass the checkpoint the engine loaded "
            "(--checkpoint, checkpoint=) to test the weights themselves"
        )
    return lines


def ranking_rows(e: StepExplanation) -> list[tuple[str, str, str, str]]:
    """(place, story, TP ranks it was computed on, rel err) rows of one explanation's ranking, for a table."""
    return [
        (str(c.rank), " + ".join(k.value for k in c.kinds), ",".join(map(str, c.on_ranks)) or "all", sci(c.rel_err))
        for c in e.candidates
    ]


def capture_heatmap(diff: CaptureDiff) -> go.Figure:
    """plotly Figure: rows the compared steps in layer order, columns b's ranks (their slice of a
    column-parallel output) and the gathered output; colour log10 of the judged error of b against a
    (the residual once the layer inputs' difference is taken away); diverged gathered cells outlined in red."""
    import plotly.graph_objects as go

    steps = [s for s in diff.steps if s.status is StepStatus.COMPARED]
    columns = [f"rank {r}" for r in range(diff.b.tp_size)] + ["gathered"]
    # The judged number: the residual where the diff propagated the inputs' difference, else rel_err.
    judged = [s.rel_err if math.isnan(s.residual) else s.residual for s in steps]
    rows = [[*(list(s.rank_errors) or [None] * diff.b.tp_size), j] for s, j in zip(steps, judged)]
    z, low, high = log10_grid(rows)
    names = [s.step for s in steps]
    hover = [
        [
            f"{html.escape(s.step)} {col}: residual {sci(v)}"
            + (f"<br>rel_err {sci(s.rel_err)}, inherited {sci(s.inherited)}" if s.inherited else "")
            + (f"<br>threshold {sci(s.threshold)}" if s.threshold is not None else "")
            + ("<br>DIVERGED" if s.diverged and col == "gathered" else "")
            for col, v in zip(columns, row)
        ]
        for s, row in zip(steps, rows)
    ]
    tickvals, ticktext = log_ticks(low, high)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=names,
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            colorscale=COLOURSCALE,
            zmin=low,
            zmax=high,
            xgap=1,
            ygap=1,
            colorbar=dict(title=dict(text="residual"), tickvals=tickvals, ticktext=ticktext),
        )
    )
    shapes = [cell_outline(len(columns) - 1, i) for i, s in enumerate(steps) if s.diverged]
    n_div = sum(s.diverged for s in steps)
    fig.update_layout(
        title=left_title(
            f"b ({html.escape(diff.b.engine)} TP{diff.b.tp_size}) against a ({html.escape(diff.a.engine)} "
            f"TP{diff.a.tp_size}): {n_div} of {len(steps)} steps diverged<br><sup>colour: log10 of the error "
            "left once the layer inputs' difference is taken away; red outline: diverged beyond the FP8 "
            "noise floor</sup>"
        ),
        shapes=shapes,
        xaxis=dict(type="category"),
        yaxis=dict(type="category", autorange="reversed"),
        height=160 + 32 * max(len(steps), 1),
        margin=dict(l=140, r=30, t=80, b=40),
        plot_bgcolor="white",
    )
    return fig
