"""Every incident of data/incidents/ reproduced by the tool's own mechanics, its diagnosis derived and held to
the file's expected one (the found step, the story or violation kind, what restores it). The negative control
(SGLang #28685, a miscompiled kernel) must show a value difference and no layout story, and bisection must
find the thread's workaround."""

from __future__ import annotations

import pytest

from mla_debug.incidents import incident_names, load_incident, run_incident

FAST = ("vllm-43416",)  # one cheap reproduction in every run; the rest are marked slow


def _params(kind: str):
    out = []
    for name in incident_names():
        if kind in load_incident(name).kinds:
            marks = () if (kind == "operands" and name in FAST) else (pytest.mark.slow,)
            out.append(pytest.param(name, marks=marks, id=name))
    return out


def _assert_reproduced(name: str, kind: str):
    run = run_incident(name, (kind,))
    assert run.checks, f"{name}: no expected field was checked"
    assert run.ok, "\n".join(f"{c.reproduction}.{c.field}: expected {c.expected}, found {c.found}" for c in run.failed)
    return run


@pytest.mark.parametrize("name", _params("operands"))
def test_operand_reproductions_give_the_threads_root_cause(name):
    run = _assert_reproduced(name, "operands")
    d = run.operands
    assert d.diverged and d.outcome == "explained" and d.stories
    assert any(v.restores for v in d.variants.values()), "some variant (the fix) must restore the op"


@pytest.mark.parametrize("name", _params("triage"))
def test_triage_reproductions_give_the_threads_root_cause(name):
    run = _assert_reproduced(name, "triage")
    assert run.triage.diverged and run.triage.workarounds


@pytest.mark.parametrize("name", _params("capture"))
def test_capture_reproductions_give_the_threads_root_cause(name):
    _assert_reproduced(name, "capture")


@pytest.mark.slow
def test_the_negative_control_gets_a_value_difference_and_no_layout_story():
    run = run_incident("sglang-28685")
    assert run.ok
    t, c = run.triage, run.capture
    assert t.diverged == ((4, "prefill"),) and t.violations == ()  # diverged, no contract broken
    assert "_use_aiter_bpreshuffle_gfx95 = False" in t.workarounds  # the thread's workaround, found by bisection
    assert "kv_b_proj" in c.diverged_steps and c.outcomes["kv_b_proj"] == "no_story"
    assert c.outcome == "no_story" and c.stories == () and c.violations == ()
    # kv_b_proj's bytes differ from the checkpoint's (the kernel preshuffled them) - and are not blamed.
    assert c.weights["kv_b_proj.weight"] == "layout"
