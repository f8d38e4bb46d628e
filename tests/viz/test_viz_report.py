"""The HTML triage report: self-contained, complete, escaped, and never overwriting."""

from __future__ import annotations

import dataclasses
import html
import re

from viz_triage_cases import BUGGY, FIXED, plotlyjs_copies, result, without_plotly_bundle

import mla_debug as md
from mla_debug.triage.changes import causes
from mla_debug.verdict import DIVERGENCE_FACTOR
from mla_debug.viz import render_html, write_html
from mla_debug.viz.patching import patching_sentence


def test_report_holds_culprits_steps_and_one_inline_plotly(tmp_path):
    r = result(BUGGY)
    assert r.culprits, "tiny-kv512 under vllm-pr51692 should diverge in decode and find a culprit"
    path = write_html(r, tmp_path / "triage.html")
    assert path == tmp_path / "triage.html"
    text = path.read_text(encoding="utf-8")

    # TP1 and TP2 decode fail the same way: one block, the diagnosis and the code fix said once each.
    (group,) = r.culprit_groups
    assert group.configs == ((1, "decode"), (2, "decode"))
    assert text.count(html.escape(causes(group.culprit.violations))) == 1
    assert text.count(html.escape(group.culprit.change)) == 1
    assert "<code>VLLM_DISABLED_KERNELS=AiterPreshuffledFp8BlockScaledMMKernel</code> restores decode" in text
    assert "vLLM PR #56433 (scenario vllm-pr56433) restores decode" in text
    for config in r.configs:
        for step in config.diff.steps:
            assert step.name in text, step.name
    assert plotlyjs_copies(text) == 1
    # one figure per mode (TP x step) and one block heatmap per diverged configuration
    diverged = [c for c in r.configs if c.verdict == "diverged"]
    assert text.count("Plotly.newPlot(") == len(r.modes) + len(diverged)
    assert f"{DIVERGENCE_FACTOR:g} x floor" in text
    for c in diverged:
        assert f"All {len(c.diff.steps)} steps of TP{c.tp} {c.mode}" in text


def test_each_culprit_group_says_what_activation_patching_found(tmp_path):
    r = result(BUGGY)
    text = render_html(r)
    (group,) = r.culprit_groups
    sentence = patching_sentence(r.patching[group.configs[0]])
    assert sentence == patching_sentence(r.patching[group.configs[1]])  # the same words: said once, for both
    assert sentence.startswith("patching absorb_uk alone") and "patching absorb_uk and absorb_uv restores" in sentence
    block = text[text.index('<div class="culprit">') : text.index("</div>", text.index('<div class="culprit">'))]
    assert block.count(f"<b>Activation patching</b> at TP1, TP2 decode: {html.escape(sentence)}</p>") == 1
    # the numbers behind it: one before/after table per configuration
    for tp in (1, 2):
        assert f"<caption>TP{tp} decode: rel_err before and after patching</caption>" in block
    assert "<th>absorb_uk, absorb_uv patched</th>" in block and "<small>patched</small>" in block
    off = render_html(dataclasses.replace(r.report(), patching={}))
    assert "<b>Activation patching</b> at TP1, TP2 decode: not recorded (the triage ran without patching" in off


def test_report_needs_no_network(tmp_path):
    text = write_html(result(BUGGY), tmp_path / "offline.html").read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, flags=re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=", text, flags=re.I)
    assert "https://cdn" not in without_plotly_bundle(text)


def test_second_write_goes_to_a_new_file(tmp_path):
    r = result(BUGGY)
    first = write_html(r, tmp_path / "report.html")
    before = first.read_bytes()
    second = md.write_html(r, tmp_path / "report.html")  # md.write_html is viz's write_html
    assert second == tmp_path / "report-2.html"
    assert first.read_bytes() == before
    assert second.stat().st_size > 0
    assert not list(tmp_path.glob(".*.tmp")), "temporary files must be renamed away"


def test_text_from_the_result_is_escaped():
    r = dataclasses.replace(result(BUGGY), scenario="<img src=x onerror=alert(1)>")
    text = render_html(r)
    assert "<img src=x" not in text
    assert html.escape("<img src=x onerror=alert(1)>") in text


def test_clean_sweep_says_so(tmp_path):
    r = result(FIXED)
    assert not any(c.verdict == "diverged" for c in r.configs)
    text = write_html(r, tmp_path / "fixed.html").read_text(encoding="utf-8")
    assert "No configuration diverged" in text
    assert text.count("Plotly.newPlot(") == len(r.modes)
    assert plotlyjs_copies(text) == 1


def test_report_packs_plotlyjs_to_well_under_its_source_size():
    from plotly.offline import get_plotlyjs

    # The bundle alone is ~4.8 MB as source; packed, a whole report with its figures is under half that.
    assert len(render_html(result(BUGGY))) < len(get_plotlyjs()) / 2


def test_report_says_where_the_numbers_came_from(tmp_path):
    r = result(BUGGY)
    text = render_html(r)
    p = r.provenance
    assert "<h2>Provenance</h2>" in text
    for value in (
        "synthetic, seed 0",
        f"mla_debug {p.mla_debug_version}, torch {p.torch_version}",
        p.tuned_table,
        p.created,
        f"max({p.divergence_factor:g} x floor, {p.min_threshold:g})",
        "bisection: ",
    ):
        assert html.escape(value) in text, value
    # the scenario's definition, not only its name
    assert html.escape('"honour_layer_flags": false') in text


def test_a_saved_report_renders_to_the_same_html_without_re_running(tmp_path):
    r = result(BUGGY)
    first = md.write_html(r, tmp_path / "live.html")
    saved = r.to_json(tmp_path / "triage.json")
    loaded = md.load_triage(saved)
    assert loaded == r.report() and loaded.block_errors  # the block heatmaps' matrices travel in the JSON
    assert loaded.patching == r.patching and loaded.patching  # and the patching checks
    again = md.write_html(loaded, tmp_path / "reloaded.html")
    assert again.read_bytes() == first.read_bytes()
    # and rendering twice gives the same bytes (no random figure or table ids, no clock)
    assert render_html(loaded) == render_html(r.report())


def test_a_report_without_block_errors_renders_and_says_what_is_missing():
    r = result(BUGGY).report()
    older = dataclasses.replace(r, block_errors=[], source_schema=2)
    text = render_html(older)
    diverged = older.diverged_runs
    assert diverged and text.count("No block heatmap: ") == len(diverged)
    assert "schema 2 file, which keeps none" in text
    older = dataclasses.replace(older, patching={})
    assert "not recorded: this report was read from a schema 2 file" in render_html(older)
    assert text.count("Plotly.newPlot(") == len(r.modes)  # the TP x step heatmaps are still drawn
    no_provenance = render_html(dataclasses.replace(older, provenance=None, bisection=None))
    assert "Not recorded: this report was read from a schema 2 file" in no_provenance


def test_a_hazards_claim_about_its_release_is_in_the_provenance():
    from mla_debug.viz.report import _reachable_row

    path = md.scenarios.data_folder() / "engines" / "hazards" / "sglang-triton-row-major-scale.yaml"
    scenario = md.scenario(path).to_dict()
    ((label, value),) = _reachable_row(scenario)
    assert label == "reachable in the release" and value.startswith("what-if: no producer in SGLang 0.5.23")
    assert _reachable_row(md.scenario("vllm-0.33").to_dict()) == []
