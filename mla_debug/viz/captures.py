"""Capture diffs and explanations in words, and the capture diff as a heatmap.

    diff_lines(diff)              # one line per step, then one per weight whose bytes differ
    explanation_lines(expl)       # one sentence per explained, unexplained or untestable step
    capture_heatmap(diff)         # rows steps, columns b's ranks and the gathered output

The data are `explain.diff.CaptureDiff` and `explain.explain.CaptureExplanation`;
plotly is imported inside `capture_heatmap` only.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from ..explain.diff import ByteRelation, CaptureDiff, Difference, LayoutBase, RankLayout, StepStatus
from ..explain.explain import Candidate, CaptureExplanation, Outcome, StepExplanation
from ..explain.stories import StoryKind
from ._cells import COLOURSCALE, DIVERGED_COLOUR, log10_grid, log_ticks, sci

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
    StoryKind.SCALE_CODES_AS_VALUES: "the E8M0 scale codes used as numbers (code 120, meaning 2^-7, read as 120.0)",
    StoryKind.PACKED_SCALES_AS_VALUES: "the packed ue8m0 scale words read as fp32 values",
    StoryKind.SCALE_TRUNCATED: "the non-power-of-two scales cut to their exponent (the power of two below) by a ue8m0 packer",
    StoryKind.UE8M0_MANTISSA_LEAK: "the scales packed to ue8m0 without masking, mantissa bits spilling into the neighbouring codes",
    StoryKind.GROUPED_SCALE_TOKEN_READ_AS_GROUP: "the grouped GEMM's scales written token-major (row t*G+g) and read group-major (row g*T+t)",
    StoryKind.WEIGHT_VNNI_READ_PLAIN: "the VNNI-packed weight bytes read as a plain matrix",
    StoryKind.WEIGHT_PLAIN_READ_AS_VNNI: "the plain weight bytes un-packed by a VNNI-aware reader",
}


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def relation_text(rank: RankLayout, base: LayoutBase) -> str:
    """How one rank's bytes relate to the base, in words."""
    of = {
        LayoutBase.CHECKPOINT: "the checkpoint's",
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


def step_line(step) -> str:
    if step.status is StepStatus.SHAPE_DIFFERS:
        return f"{step.step}: recorded in shapes {step.shape_a} and {step.shape_b}; not compared"
    if step.status is StepStatus.ONLY_IN_A:
        return f"{step.step}: only in a"
    if step.status is StepStatus.ONLY_IN_B:
        return f"{step.step}: only in b"
    limit = f" (threshold {sci(step.threshold)})" if step.threshold is not None else ""
    verdict = "DIVERGED" if step.diverged else "ok"
    ranks = ""
    if step.diverged and step.rank_errors:
        ranks = "; per rank " + ", ".join(sci(e) for e in step.rank_errors)
    return f"{step.step}: rel_err {sci(step.rel_err)}{limit} {verdict}{ranks}"


def diff_lines(diff: CaptureDiff) -> list[str]:
    """The diff in words: the sides, each compared step, then the weights whose bytes differ."""
    head = (
        f"a: {diff.a.engine} TP{diff.a.tp_size}, b: {diff.b.engine} TP{diff.b.tp_size}, layer {diff.b.layer}, "
        f"{diff.b.tokens} tokens; weights compared with "
        + ("the checkpoint" if diff.base is LayoutBase.CHECKPOINT else "a side's own bytes (no checkpoint)")
    )
    lines = [head] + [step_line(s) for s in diff.steps if s.status is not StepStatus.ONLY_IN_A]
    lines += weight_lines(diff) or ["no weight or scale differs between the sides"]
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


def explanation_sentence(e: StepExplanation) -> str:
    """One sentence for one step or derived weight."""
    what = e.tensor if e.tensor in ("W_UK", "W_UV") else f"the observed {e.step} output"
    if e.outcome is Outcome.UNTESTABLE:
        lacking = f" (the capture lacks {', '.join(e.missing)})" if e.missing else ""
        return f"{e.step}: not tested (the stories recompute linears, norms and derived weights){lacking}"
    if e.outcome is Outcome.CORRECT_FROM_INPUTS:
        c = e.correct
        inherited = " - its divergence comes from an earlier step" if e.observed_rel_err is not None else ""
        return f"{e.step}: {what} is what its captured inputs give with {STORY_WORDS[StoryKind.CORRECT]} (rel err {sci(c.rel_err)}){inherited}"
    if e.outcome is Outcome.NO_STORY:
        best = e.best
        tried = f"; the closest, {_reading_words(best)}, is off by rel err {sci(best.rel_err)}" if best else ""
        return f"{e.step}: no known story explains this step{tried}"
    best, correct = e.best, e.correct
    rest = f", not with {STORY_WORDS[StoryKind.CORRECT]} (rel err {sci(correct.rel_err)})" if correct else ""
    equals = "equals" if e.tensor in ("W_UK", "W_UV") else "equals the reference computed with"
    return f"{e.step}: {_held_words(e)}{what} {equals} {_reading_words(best)} (rel err {sci(best.rel_err)}){rest}"


def explanation_lines(explanation: CaptureExplanation) -> list[str]:
    """One sentence per explanation; a clean capture says so."""
    lines = [explanation_sentence(e) for e in explanation.explanations]
    if not explanation.stories and not explanation.unexplained:
        lines.append("no layout story: every step and derived weight is what its captured inputs give")
    return lines


def ranking_rows(e: StepExplanation) -> list[tuple[str, str, str]]:
    """(rank, story, rel err) rows of one explanation's ranking, for a table."""
    return [(str(c.rank), " + ".join(k.value for k in c.kinds), sci(c.rel_err)) for c in e.candidates]


def capture_heatmap(diff: CaptureDiff) -> go.Figure:
    """plotly Figure: rows the compared steps in layer order, columns b's ranks (their slice of a
    column-parallel output) and the gathered output; colour log10 rel_err of b against a; diverged
    gathered cells outlined in red."""
    import plotly.graph_objects as go

    steps = [s for s in diff.steps if s.status is StepStatus.COMPARED]
    columns = [f"rank {r}" for r in range(diff.b.tp_size)] + ["gathered"]
    rows = [[*(list(s.rank_errors) or [None] * diff.b.tp_size), s.rel_err] for s in steps]
    z, low, high = log10_grid(rows)
    names = [s.step for s in steps]
    hover = [
        [
            f"{html.escape(s.step)} {col}: rel_err {sci(v)}"
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
            colorbar=dict(title=dict(text="rel_err"), tickvals=tickvals, ticktext=ticktext),
        )
    )
    shapes = [
        dict(
            type="rect",
            xref="x",
            yref="y",
            x0=len(columns) - 1.5,
            x1=len(columns) - 0.5,
            y0=i - 0.5,
            y1=i + 0.5,
            line=dict(color=DIVERGED_COLOUR, width=3),
        )
        for i, s in enumerate(steps)
        if s.diverged
    ]
    n_div = sum(s.diverged for s in steps)
    fig.update_layout(
        title=dict(
            text=(
                f"b ({html.escape(diff.b.engine)} TP{diff.b.tp_size}) against a ({html.escape(diff.a.engine)} "
                f"TP{diff.a.tp_size}): {n_div} of {len(steps)} steps diverged<br><sup>colour: log10 rel_err; "
                "red outline: diverged beyond the FP8 noise floor</sup>"
            ),
            x=0.0,
            xref="paper",
        ),
        shapes=shapes,
        xaxis=dict(type="category"),
        yaxis=dict(type="category", autorange="reversed"),
        height=160 + 32 * max(len(steps), 1),
        margin=dict(l=140, r=30, t=80, b=40),
        plot_bgcolor="white",
    )
    return fig
