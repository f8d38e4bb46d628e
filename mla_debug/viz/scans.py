"""A scan comparison in words and as a figure: which layer the divergence starts in, what each step
inherited, and how to capture that layer whole."""

from __future__ import annotations

from ..explain.scan_compare import ScanComparison, ScanStepComparison, StepOutcome

_OUTCOME_WORDS = {
    StepOutcome.AGREES: "agrees (within its own rounding)",
    StepOutcome.INHERITED: "differs by what its input passed on",
    StepOutcome.DIVERGED: "DIVERGES beyond what its input explains",
    StepOutcome.UNJUDGED: "not judged",
}


def _side(label: str, side) -> str:
    engine = side.engine + (f" {side.engine_version}" if side.engine_version else "")
    note = f" ({side.note})" if side.note else ""
    return f"{label}: {engine} TP{side.tp_size}, {side.layers} layers, {side.tokens} tokens{note}"


def step_sentence(s: ScanStepComparison) -> str:
    """One step in words: its difference, what it inherited, and the verdict."""
    head = f"layer {s.layer} {s.step.value}: rel err {s.rel_err:.2e}"
    if s.input_err is not None:
        head += f", its input ({' + '.join(s.input_steps)}) {s.input_err:.2e}"
    if s.threshold is not None:
        head += f" (line {s.threshold:.2e})"
    text = f"{head} - {_OUTCOME_WORDS[s.outcome]}"
    if s.outcome is StepOutcome.DIVERGED and s.tokens_over:
        text += f"; on {len(s.tokens_over)} of {len(s.token_errors)} kept tokens"
    if s.disagreeing_ranks:
        text += f"; ranks holding other bytes than their rank 0: {', '.join(s.disagreeing_ranks)}"
    if s.note:
        text += f" [{s.note}]"
    return text


def scan_lines(comparison: ScanComparison, *, every_step: bool = False) -> list[str]:
    """The comparison in words: the sides, one line per layer (every step with `every_step`, else the
    steps that differ beyond their rounding), the first diverging step and the capture call for it."""
    lines = [_side("a", comparison.a), _side("b", comparison.b)]
    for layer in comparison.layers:
        if every_step or layer.outcome in (StepOutcome.DIVERGED, StepOutcome.UNJUDGED):
            lines += [step_sentence(s) for s in layer.steps]
            continue
        worst = max((s.rel_err for s in layer.steps), default=float("nan"))
        if layer.outcome is StepOutcome.AGREES:
            lines.append(f"layer {layer.layer}: every step agrees (largest rel err {worst:.2e})")
        else:
            ends = layer.steps[0].rel_err, layer.steps[-1].rel_err
            lines.append(
                f"layer {layer.layer}: differs by what its input passed on (rel err {ends[0]:.2e} in, {ends[1]:.2e} out)"
            )
    first = comparison.first_divergent
    if first is None:
        lines.append("no layer diverges beyond what its input explains")
    else:
        lines.append(f"the divergence starts in layer {first.layer} at {first.step.value}; capture that layer whole:")
        if first.step.value == "layer.output":
            lines.append("  (its attention output agrees: the MLP/MoE part of the layer differs, which md.capture does not record)")
        lines += [f"  {line}" for line in (comparison.capture_call or "").splitlines()]
    lines += list(comparison.notes)
    return lines


def scan_figure(comparison: ScanComparison):
    """plotly figure: each step's relative error by layer, with its divergence line."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for step in ("layer.input", "attn.input", "attn.output", "layer.output"):
        rows = [s for layer in comparison.layers for s in layer.steps if s.step.value == step]
        fig.add_trace(go.Scatter(x=[s.layer for s in rows], y=[s.rel_err for s in rows], mode="lines+markers", name=step))
    rows = [layer.step("attn.output") for layer in comparison.layers]
    fig.add_trace(
        go.Scatter(x=[s.layer for s in rows], y=[s.threshold for s in rows], mode="lines", name="attn.output line",
                   line={"dash": "dot"})
    )
    first = comparison.first_divergent
    if first is not None:
        fig.add_vline(x=first.layer, line={"color": "red"}, annotation_text=f"diverges: layer {first.layer}")
    fig.update_layout(xaxis_title="decoder layer", yaxis_title="relative error, b vs a", yaxis_type="log")
    return fig
