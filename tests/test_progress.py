"""Progress reports: a redrawing bar only where it can redraw, whole lines in a log."""

from __future__ import annotations

import io

from tqdm import tqdm

from mla_debug._progress import LogProgress, progress


class FakeClock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_file_gets_whole_lines_at_most_one_per_interval():
    log, clock = io.StringIO(), FakeClock()
    with progress(total=4, desc="triage tiny", unit="run", enabled=True, file=log, log_every_s=30, clock=clock) as bar:
        assert isinstance(bar, LogProgress)
        bar.update()  # at once: no line
        clock.now += 31
        bar.update()  # an interval later: one line
        bar.update()  # right after it: none
        clock.now += 5
        bar.update()
    text = log.getvalue()
    assert "\r" not in text
    assert text.splitlines() == [
        "triage tiny: started (4 runs)",
        "triage tiny: 2/4 runs (50%) after 31 s",
        "triage tiny: 4/4 runs (100%) done in 36.0 s",
    ]


def test_iterating_reports_every_item_and_closes_once():
    log, clock = io.StringIO(), FakeClock()
    bar = progress({"a": 1, "b": 2}.items(), desc="weights", unit="module", enabled=True, file=log, clock=clock)
    assert [key for key, _ in bar] == ["a", "b"]
    bar.close()  # a second close (tqdm allows it) adds nothing
    assert log.getvalue().splitlines() == ["weights: started (2 modules)", "weights: 2/2 modules (100%) done in 0.0 s"]


def test_unknown_total_counts_without_a_percentage():
    log = io.StringIO()
    bar = progress(desc="steps", enabled=True, file=log, clock=FakeClock())
    bar.update(3)
    bar.close()
    assert log.getvalue().splitlines() == ["steps: started", "steps: 3 its done in 0.0 s"]


def test_default_is_silent_in_a_log_and_disabled_means_silent_everywhere():
    for enabled, stream in ((None, io.StringIO()), (False, io.StringIO()), (False, Terminal())):
        bar = progress(total=2, desc="quiet", enabled=enabled, file=stream)
        bar.update(2)
        bar.close()
        assert stream.getvalue() == "", (enabled, type(stream).__name__)


def test_terminal_gets_a_tqdm_bar():
    screen = Terminal()
    for enabled in (None, True):
        bar = progress(total=2, desc="drawn", enabled=enabled, file=screen)
        assert isinstance(bar, tqdm) and not bar.disable
        bar.update(2)
        bar.close()
    assert "drawn" in screen.getvalue()
