"""The cached executor keeps one TP size's linears and hands the rest of the memory back."""

from __future__ import annotations

import platform

import pytest

import mla_debug as md
import mla_debug.triage as A
from mla_debug import _memory
from mla_debug.parallel import cached


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_trim_runs_under_glibc():
    assert _memory.return_freed_memory() is True


def test_moving_to_another_tp_size_drops_the_old_linears_and_trims(monkeypatch):
    trims = []
    monkeypatch.setattr(cached, "return_freed_memory", lambda: trims.append(1) or True)
    session = A.TriageSession("tiny", "mi355x", tokens=4)
    scen = md.scenario("vllm-pr51692")
    session.run(scen, 1, "prefill")
    assert session.cache.loaded_tp_sizes == {1} and len(trims) == 1
    session.run(scen, 1, "decode")  # the same TP size: nothing dropped, no trim
    assert len(trims) == 1
    session.run(scen, 2, "prefill")
    assert session.cache.loaded_tp_sizes == {2} and len(trims) == 2
