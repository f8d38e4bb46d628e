"""One self-contained HTML report of a TP triage (`md.write_html(report, path)`), drawn from a
TriageReport only: the report of a live triage and the same report read back from its JSON render to
the same bytes (figure and table ids are numbered, every date and version shown comes from the report).

The file embeds plotly.js once (gzipped in base64 with the first figure, unpacked by the browser) and
links nothing, so it opens from a mail attachment or an air-gapped machine. It is written atomically
and never replaces an existing file: a taken name gets a numbered sibling (`report-2.html`), and the
path actually written is returned.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .._files import write_atomically
from ..triage.changes import causes
from ..verdict import DIVERGENCE_FACTOR, MIN_THRESHOLD
from ._cells import sci, violation_lines
from ._report_data import as_report
from .caveats import caveat_lines, positions_text
from .culprits import action_lines, bisection_line, configs_label
from .embed import figure_html, packed_plotlyjs_html
from .heatmaps import block_heatmap, error_heatmap
from .patching import patching_lines, recovery_columns, recovery_rows
from .profile import profile_html
from .tables import steps_styler, summary_styler

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from ..triage.report import RunReport, TriageReport

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5em auto;
       max-width: 1400px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
.meta { color: #555; margin-top: 0; } .verdict { font-size: 1.1em; }
.bad { color: #9b1c1c; font-weight: bold; } .good { color: #1b6e2b; font-weight: bold; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border-bottom: 1px solid #e4e4e4; }
code { background: #f3f3f3; padding: 0 0.25em; border-radius: 3px; }
details { margin: 0.6em 0 1.2em; } summary { cursor: pointer; font-weight: bold; }
.culprit { margin-bottom: 0.6em; } .step dt { font-weight: bold; float: left; width: 11em; clear: left; }
.step dd { margin-left: 11.5em; margin-bottom: 0.2em; }
.legend dt { font-weight: bold; margin-top: 0.5em; }
.patching td, .patching th { padding: 0 0.6em; text-align: right; } .patching td:first-child { text-align: left; }
"""


class _Figures:
    """Turns figures into HTML fragments; the first one brings plotly.js, packed (about 2 MB instead of
    4.8 MB inline), and the others draw with it. Figures are numbered in page order (their div ids)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fig: go.Figure) -> str:
        fragment = figure_html(fig, div_id=f"figure-{self.count + 1}")
        if self.count == 0:
            fragment = f"{packed_plotlyjs_html()}\n{fragment}"
        self.count += 1
        return fragment


def _e(value: object) -> str:
    return html.escape(str(value))


def _config_label(tp: int, mode: str) -> str:
    return f"TP{tp} {mode}"


def _verdict(report: TriageReport) -> str:
    diverged = report.diverged_runs
    if not diverged:
        within = " - within the caveats below" if report.caveats else ""
        return (
            f'<p class="verdict"><span class="good">No configuration diverged</span>: every step of all '
            f"{len(report.runs)} runs stays within its threshold of the reference{within}.</p>"
        )
    where = ", ".join(
        f"{_e(_config_label(r.tp, r.mode))} (first at <code>{_e(r.first_divergent_step)}</code>)" for r in diverged
    )
    return (
        f'<p class="verdict"><span class="bad">{len(diverged)} of {len(report.runs)} configurations '
        f"diverged</span>: {where}.</p>"
    )


_BAD = ' class="bad"'


def _caveats(report: TriageReport) -> str:
    """What the verdicts do not cover (`viz.caveats`), or that an older report did not record it."""
    if not report.caveats_recorded:
        return (
            f"<h2>Caveats</h2><p>Not recorded: this report was read from a schema {report.source_schema} file, "
            "written before reports kept them.</p>"
        )
    if not report.caveats:
        return ""
    items = "".join(
        f"<li><b{_BAD if line.warning else ''}>{_e(line.label)}</b>: {_e(line.text)}</li>"
        for line in caveat_lines(report.caveats)
    )
    return f"<h2>Caveats</h2><ul>{items}</ul>"


def _recovery_cell(value: float | None, diverged: bool | None, patched: bool) -> str:
    if value is None:
        return "<td>not patchable</td>"
    mark = " <small>patched</small>" if patched else ""
    return f"<td{_BAD if diverged else ''}>{sci(value)}{mark}</td>"


def _recovery_table(report: TriageReport, tp: int, mode: str) -> str:
    """Every step from the first patched one on: rel_err before patching and with each attempt's
    steps patched, against the step's threshold (red: above it)."""
    confirmation = report.confirmation(tp, mode)
    rows = recovery_rows(confirmation) if confirmation is not None else []
    if not rows:
        return ""
    head = "".join(f"<th>{_e(c)}</th>" for c in ["step", "threshold", "before", *recovery_columns(confirmation)])
    body = "".join(
        f"<tr><td><code>{_e(row.step)}</code></td><td>{sci(row.threshold)}</td>"
        f"{_recovery_cell(row.before, row.diverged_before, False)}"
        + "".join(_recovery_cell(*cell) for cell in zip(row.after, row.diverged_after, row.patched))
        + "</tr>"
        for row in rows
    )
    caption = f"<caption>{_e(_config_label(tp, mode))}: rel_err before and after patching</caption>"
    return f'<table class="patching">{caption}<tr>{head}</tr>{body}</table>'


def _patching(report: TriageReport, configs) -> str:
    """What activation patching says about `configs`: one sentence per set of configurations whose
    checks read the same, then each configuration's numbers behind it (folded)."""
    parts = []
    for line in patching_lines(report, configs):
        parts.append(f"<p><b>Activation patching</b> at {_e(line.label)}: {_e(line.text)}</p>")
        tables = "".join(_recovery_table(report, tp, mode) for tp, mode in line.configs)
        if tables:
            parts.append(f"<details><summary>rel_err before and after patching</summary>{tables}</details>")
    return "".join(parts)


def _culprits(report: TriageReport) -> str:
    """One block per culprit group (configurations that fail the same way and are restored by the same
    remedies): the sentence once, then what to do - workaround, code fix, known upstream fix - and what
    activation patching says about the configurations. Diverged configurations without a culprit get
    their patching check after the groups."""
    parts = ["<h2>Culprits</h2>"]
    if not report.culprits and not report.unresolved:
        parts.append(
            "<p>Nothing to bisect: no configuration diverged.</p>"
            if not report.diverged_runs
            else "<p>No culprit search was run.</p>"
        )
    for group in report.culprit_groups:
        k = group.culprit
        items = []
        for line in action_lines(group):
            action = f"<code>{_e(line.action)}</code>" if line.setting else _e(line.action)
            item = f"<li><b>{_e(line.label)}</b>: {action} {_e(line.outcome)} <small>({_e(line.note)})</small>"
            if line.alternatives:
                others = "".join(f"<li>{_e(a)}</li>" for a in line.alternatives)
                item += (
                    f"<details><summary>{len(line.alternatives)} other minimal alternative(s)</summary>"
                    f"<ul>{others}</ul></details>"
                )
            items.append(item + "</li>")
        parts.append(
            f'<div class="culprit"><b>{_e(configs_label(group.configs))}</b>, first divergent step '
            f"<code>{_e(k.step)}</code>, layer <code>{_e(k.layer)}</code>:<br>{_e(causes(k.violations))}"
            f'<ul class="actions">{"".join(items)}</ul>{_patching(report, group.configs)}</div>'
        )
    if report.unresolved:
        labels = _e(configs_label(report.unresolved))
        parts.append(f"<p>No code change set of up to three changes and no kernel disable restored: {labels}.</p>")
    explained = {config for group in report.culprit_groups for config in group.configs}
    rest = [(r.tp, r.mode) for r in report.diverged_runs if (r.tp, r.mode) not in explained]
    if rest:
        parts.append(_patching(report, rest))
    return "\n".join(parts)


def _provenance(report: TriageReport) -> str:
    """Where the numbers came from: weights, inputs, yardsticks, tables, software."""
    p = report.provenance
    if p is None:
        return (
            f"<h2>Provenance</h2><p>Not recorded: this report was read from a schema {report.source_schema} "
            "file, written before reports kept their provenance.</p>"
        )
    import json

    scenario = p.scenario
    rows = [
        ("weights", p.weights.describe()),
        ("model, platform", f"{p.model} on {p.platform}"),
        ("scenario", f"{scenario.get('name')}: {scenario.get('description', '')}"),
        *_reachable_row(scenario),
        ("inputs", f"{p.tokens} tokens at {positions_text(report.positions, p.tokens)}, seed {p.seed}"),
        ("device", p.device),
        ("threshold", f"max({p.divergence_factor:g} x floor, {p.min_threshold:g})"),
        ("tuned table", p.tuned_table),
        ("software", f"mla_debug {p.mla_debug_version}, torch {p.torch_version}, Python {p.python_version}"),
        ("created", f"{p.created} on {p.host}"),
    ]
    if report.bisection is not None:
        rows.append(("bisection", bisection_line(report.bisection)))
    body = "".join(f"<dt>{_e(label)}</dt><dd>{_e(value)}</dd>" for label, value in rows)
    definition = _e(json.dumps(scenario, indent=2, sort_keys=True))
    return (
        f'<h2>Provenance</h2><dl class="step">{body}</dl>'
        f"<details><summary>Scenario definition</summary><pre>{definition}</pre></details>"
    )


def _first_step(run: RunReport) -> str:
    """The first divergent step of one configuration, opened: kernel, layouts, classification,
    violations - what the step table says about it, as a definition list."""
    step = run.first_divergent
    if step is None:
        return ""
    items = [
        ("step", f"<code>{_e(step.name)}</code>"),
        ("rel_err", f"{sci(step.rel_err)} (floor {sci(step.floor)}, threshold {sci(step.threshold)})"),
        ("kernel", f"{_e(step.kernel or '-')} (reference: {_e(step.reference_kernel or '-')})"),
        ("scale layout", _e(step.scale_layout if step.scale_layout is not None else "-")),
        ("weight layout", _e(step.weight_layout if step.weight_layout is not None else "-")),
        ("classification", _e(step.classification)),
    ]
    lines = violation_lines(step.violations)
    items.append(("violations", "<br>".join(_e(line) for line in lines) if lines else "none"))
    body = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in items)
    return f'<dl class="step">{body}</dl>'


def _block_figure(report: TriageReport, run: RunReport, figure: _Figures) -> str:
    """The block heatmap of a diverged configuration, or why the report cannot draw it."""
    try:
        return figure(block_heatmap(report, run.tp, run.mode))
    except KeyError as err:
        return f"<p><i>No block heatmap: {_e(err.args[0] if err.args else err)}.</i></p>"


def _legend(report: TriageReport) -> str:
    p = report.provenance
    factor, minimum = (p.divergence_factor, p.min_threshold) if p is not None else (DIVERGENCE_FACTOR, MIN_THRESHOLD)
    return f"""
<h2>How to read this report</h2>
<dl class="legend">
<dt>rel_err</dt>
<dd>Relative L2 error, ||run - reference|| / ||reference||, of one step's output against the same step of
the <code>reference</code> scenario (torch-reference kernel everywhere, correct layouts) at the same TP
size, on the same FP8 weights and inputs. Both runs are gathered into TP-independent shapes first, so
every TP size is compared step by step. Colours are log10 of it; an exact match (0) is drawn at the
bottom of the colour bar, a non-finite error at its top.</dd>
<dt>floor</dt>
<dd>The rel_err of that reference run against the fp32 truth (the same weights dequantized, activations
unquantized, fp32 arithmetic, TP1): what FP8 quantization alone costs at that step.</dd>
<dt>threshold</dt>
<dd>max({factor:g} x floor, {minimum:g}). Two correct FP8 runs differ by about
sqrt(2) x floor (independent roundings); a misread scale or weight by far more. A step above its
threshold has <b>diverged</b> (outlined and crossed in red). Errors propagate downstream, so the first
diverged step in layer order is where to look; later ones usually inherit its error.</dd>
<dt>violations</dt>
<dd>Layout contracts a step broke: a reader took bytes in another order than they were written.
<i>effective</i> when the values read are wrong, <i>harmless</i> when the bytes happen to coincide for
these shapes (M=1, or a shuffle period completed).</dd>
<dt>block heatmap</dt>
<dd>rel_err per token and per 128-column block of the step output (flattened per token), aligned to the
FP8 quantization blocks: a misread activation scale lights up whole rows of blocks for some tokens, a
misread weight whole columns of blocks for every token.</dd>
<dt>culprit</dt>
<dd>Found by bisection, which runs changed scenarios and keeps the smallest sets that bring every step
of a configuration back within its threshold. <i>code fix</i>: changes to the serving engine's code (run
one layer through torch-reference, honour the direct-read flags, switch on one model-side fix).
<i>workaround now</i>: kernels to disable, as <code>VLLM_DISABLED_KERNELS</code> does, so the next kernel
in vLLM's priority list takes their layers - no code change. <i>known fix</i>: the upstream change known
to fix the scenario, run at the same configuration. Every one of them was run; configurations with the
same culprit and remedies are shown once.</dd>
<dt>activation patching</dt>
<dd>Each diverged configuration run again with its first divergent step's output taken from the
reference, every later step judged again by its threshold. When everything after it comes back, the
fault is inside that step; when some later step still diverges, there is a second fault after it (or
an earlier one that stayed below the noise floor), and the first step still diverging is patched too,
until the output comes back. The table shows each step's rel_err before and with each set of patched
steps (a patched step's own error is the substitution's: zero against a reference of the same TP
size).</dd>
</dl>
"""


def render_html(report: TriageReport) -> str:
    """The report as one HTML string (what `write_html` writes). A TriageResult is drawn through its
    report. Everything shown comes from the report, so equal reports give equal strings."""
    report = as_report(report)
    figure = _Figures()
    title = f"TP triage: {report.model} on {report.platform} under {report.scenario}"
    took = f"triage took {report.elapsed_s:.1f} s" if report.elapsed_s is not None else "triage time not recorded"
    version = f"; mla_debug {report.provenance.mla_debug_version}" if report.provenance is not None else ""
    meta = (
        f"{report.tokens} tokens at {positions_text(report.positions, report.tokens)}, seed {report.seed}; "
        f"TP sizes {', '.join(map(str, report.tp_sizes))}; "
        f"modes {', '.join(report.modes)}; {took}{version}"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{_e(meta)}</p>',
        _verdict(report),
        _caveats(report),
        "<h2>Summary</h2>",
        summary_styler(report).to_html(),
        _culprits(report),
        profile_html(report.profile),
        "<h2>Where each run leaves the reference: TP size x step</h2>",
    ]
    for mode in report.modes:
        parts += [f"<h3>{_e(mode)}</h3>", figure(error_heatmap(report, mode))]

    diverged = report.diverged_runs
    if diverged:
        parts.append("<h2>Diverged configurations</h2>")
    for run in diverged:
        label = _config_label(run.tp, run.mode)
        parts += [
            f"<h3>{_e(label)}: first divergent step <code>{_e(run.first_divergent_step)}</code></h3>",
            _first_step(run),
            _block_figure(report, run, figure),
            f"<details><summary>All {len(run.steps)} steps of {_e(label)}</summary>",
            steps_styler(report, run.tp, run.mode).to_html(),
            "</details>",
        ]
    parts += [_provenance(report), _legend(report), "</body></html>", ""]
    return "\n".join(parts)


def write_html(report: TriageReport, path: str | os.PathLike) -> Path:
    """Write the self-contained HTML report of `report` (a TriageReport, or a TriageResult drawn
    through its report) and return the path written.

    Never overwrites: if `path` exists the report goes to `stem-2.html` (then -3, ...) beside it.

        out = md.write_html(md.load_triage("triage.json"), "triage.html")
    """
    return write_atomically(path, render_html(report))


def _reachable_row(scenario: dict) -> list[tuple[str, str]]:
    """A hazard file's claim about its release (``reachable``), when the scenario makes one."""
    reach = scenario.get("reachable")
    if not isinstance(reach, dict):
        return []
    tp = "depends on the TP size" if reach.get("tp_dependent") else "at every TP size"
    return [("reachable in the release", f"{reach.get('verdict')}: {reach.get('says', '')} ({tp})")]
