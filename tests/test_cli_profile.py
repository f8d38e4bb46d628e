"""`mla-debug profile`, `traces compare` and `tensorboard`, run in-process (and TensorBoard's lifetime in a
child process, with a stand-in `tensorboard` program)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from layer_steps import V3_DECODE_STEPS

import mla_debug as md
from mla_debug.cli import main
from mla_debug.cli.profile import INSTALL_HINT

REPO = Path(__file__).resolve().parents[1]
PROFILE = ["profile", "--model", "tiny", "--platform", "mi355x", "--scenario", "vllm-pr51692", "--tp", "2"]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    # rich sizes tables to the terminal; a fixed width keeps every cell on one line in the captured text.
    monkeypatch.setenv("COLUMNS", "200")


def _rows(text: str) -> list[list[str]]:
    """The cells of every rich table row in `text`, headers included ('│ a │ b │' -> ['a', 'b'])."""
    lines = [line.replace("┃", "│").strip() for line in text.splitlines()]
    return [[c.strip() for c in line.strip("│").split("│")] for line in lines if line.startswith("│")]


def _profile(tmp_path: Path, capsys, mode: str) -> tuple[Path, str]:
    assert main([*PROFILE, "--mode", mode, "--tokens", "8", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (folder,) = re.findall(r"^trace folder: (.+)$", out, re.MULTILINE)
    return Path(folder), out


def test_profile_prints_the_step_table_and_writes_a_fresh_folder_each_time(tmp_path, capsys):
    folder, out = _profile(tmp_path, capsys, "decode")
    assert folder.parent == tmp_path
    trace = md.load_trace(folder)
    steps = trace.per_step()
    assert trace.warnings == [] and not trace.has_gpu
    assert "tiny TP2 decode on mi355x under vllm-pr51692 (8 tokens, simulated)" in out
    rows = _rows(out)
    assert rows[0] == ["step", "kernel", "wall us", "CPU ops", "share"]  # no GPU columns on a CPU trace
    assert rows[1:] == [
        [r.step, r.kernel, f"{r.wall_us:,.1f}", f"{r.cpu_ops:,}", f"{r.share:.1%}"] for r in steps.itertuples()
    ]
    assert [r[0] for r in rows[1:]] == V3_DECODE_STEPS
    files = sorted(p.name for p in folder.iterdir())
    assert len(files) == 2 and files[0] == "mla_debug_meta.json" and files[1].endswith(".pt.trace.json.gz")
    assert f"  {files[1]}" in out.splitlines()
    meta = json.loads((folder / "mla_debug_meta.json").read_text())
    assert (meta["model"], meta["platform"], meta["scenario"], meta["tp"], meta["mode"]) == (
        "tiny",
        "mi355x",
        "vllm-pr51692",
        2,
        "decode",
    )
    assert (meta["tokens"], meta["executor"], meta["command"]) == (8, "simulated", "mla-debug profile")
    assert f"browse: mla-debug tensorboard {tmp_path}" in out

    second, _ = _profile(tmp_path, capsys, "decode")  # the same command again: a new folder, the first kept
    assert second != folder and sorted(tmp_path.iterdir()) == sorted([folder, second])
    assert sorted(p.name for p in folder.iterdir()) == files


def test_traces_compare_prints_step_and_kernel_deltas(tmp_path, capsys):
    decode, _ = _profile(tmp_path, capsys, "decode")
    prefill, _ = _profile(tmp_path, capsys, "prefill")
    assert main(["traces", "compare", str(decode), str(prefill), "--top", "5"]) == 0
    out = capsys.readouterr().out
    diff = md.compare_traces(decode, prefill)
    assert f"A: {decode} (tiny vllm-pr51692 TP2 decode)" in out
    assert f"B: {prefill} (tiny vllm-pr51692 TP2 prefill)" in out
    rows = _rows(out)
    header = ["step", "A us", "B us", "delta us", "B/A", "kernel A -> B"]  # no launches: CPU-only traces
    start = rows.index(header)
    step_rows = rows[start + 1 : start + 1 + len(diff.per_step)]

    def us(x: float) -> str:
        return "-" if x != x else f"{x:,.1f}"

    for cells, r in zip(step_rows, diff.per_step.itertuples()):
        assert cells[:3] == [r.step, us(r.a_us), us(r.b_us)]
        assert cells[3] == ("-" if r.delta_us != r.delta_us else f"{r.delta_us:+,.1f}")
    by_step = {cells[0]: cells for cells in step_rows}
    assert by_step["absorb_uk"][2:5] == ["-", "-", "-"] and by_step["absorb_uk"][5] == "bmm -> -"
    assert by_step["kv_b_proj"][1] == "-" and by_step["kv_b_proj"][5] == "- -> aiter-blockscale"
    assert "no GPU kernels or launch calls in either trace (CPU-only runs): launches not shown" in out
    assert f"CPU ops by step: the 5 largest changes of {len(diff.per_kernel)} (us)" in out
    kernel_start = rows.index(
        ["step", "name (A -> B when they differ)", "A us", "B us", "delta us", "B/A", "count A -> B"]
    )
    assert len(rows) - kernel_start - 1 == 5
    # Added and removed ops, one per line, exactly the diff's.
    assert f"added in B ({len(diff.added)})" in out and f"removed in B ({len(diff.removed)})" in out
    for name in diff.added + diff.removed:
        assert f"  {name}" in out.splitlines()


def test_profile_and_compare_bad_input(tmp_path, capsys):
    assert main([*PROFILE[:-1], "3", "--out", str(tmp_path)]) == 2
    assert "mla-debug profile: error: tiny: tp_size=3 does not divide num_heads=16" in capsys.readouterr().err
    assert main([*PROFILE, "--tokens", "0", "--out", str(tmp_path)]) == 2
    assert "mla-debug profile: error: tokens=0 must be >= 1" in capsys.readouterr().err
    assert main(["profile", "--model", "tiny", "--scenario", "nope", "--out", str(tmp_path)]) == 2
    assert "mla-debug profile: error: unknown scenario 'nope'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing was profiled, so no folder was made
    missing = tmp_path / "missing"
    assert main(["traces", "compare", str(missing), str(missing)]) == 2
    assert f"mla-debug traces compare: error: {missing}: no such trace file or folder" in capsys.readouterr().err


def _venv_has_tensorboard() -> bool:
    return (Path(sys.executable).parent / "tensorboard").exists()


@pytest.mark.skipif(_venv_has_tensorboard(), reason="tensorboard is installed beside this Python")
def test_tensorboard_without_tensorboard_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # nor anywhere on PATH
    assert main(["tensorboard", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"mla-debug tensorboard: error: tensorboard is not installed; {INSTALL_HINT}\n"
    assert INSTALL_HINT == "pip install 'mla-debug[profile]' (tensorboard and torch-tb-profiler)"
    assert main(["tensorboard", str(tmp_path / "nowhere")]) == 2
    assert f"error: {tmp_path / 'nowhere'} is not a folder" in capsys.readouterr().err


FAKE_TENSORBOARD = """\
    #!{python}
    # Stands in for tensorboard: records its arguments and pid, then serves until it is stopped.
    import json, os, sys, time
    with open(os.environ["FAKE_TB_LOG"], "w") as log:
        json.dump({{"argv": sys.argv[1:], "pid": os.getpid()}}, log)
    while True:
        time.sleep(0.1)
"""


@contextlib.contextmanager
def _interruptible_children():
    """Children started inside stop on Ctrl-C (SIGINT), as when started from a terminal. A test run started
    in the background (nohup, `cmd &` in a script, some CI runners) ignores SIGINT, which a child inherits,
    so the CLI would never see the Ctrl-C this test sends; a handled signal resets to its default in a child."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(_venv_has_tensorboard(), reason="tensorboard is installed beside this Python")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_tensorboard_serves_on_localhost_and_leaves_no_process_behind(tmp_path, stop):
    bin_dir, logdir, log = tmp_path / "bin", tmp_path / "profiles", tmp_path / "fake.json"
    bin_dir.mkdir()
    logdir.mkdir()
    fake = bin_dir / "tensorboard"
    fake.write_text(textwrap.dedent(FAKE_TENSORBOARD.format(python=sys.executable)))
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", FAKE_TB_LOG=str(log))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with _interruptible_children():
        cli = subprocess.Popen(
            [sys.executable, "-m", "mla_debug.cli", "tensorboard", str(logdir)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        url_line = cli.stdout.readline()
        deadline = time.monotonic() + 60
        while not log.exists() or not log.read_text():
            assert cli.poll() is None and time.monotonic() < deadline, cli.stderr.read()
            time.sleep(0.05)
        time.sleep(0.1)  # the stand-in has written its record; let the CLI settle into its wait
        child = json.loads(log.read_text())
        port = int(re.fullmatch(r"TensorBoard for (.+): http://127\.0\.0\.1:(\d+)/#pytorch_profiler .*\n", url_line)[2])
        assert child["argv"] == ["--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)]
        assert 0 < port < 65536 and _alive(child["pid"])
        cli.send_signal(stop)  # to the CLI only: it must stop TensorBoard itself
        assert cli.wait(timeout=30) == 0
        assert "stopping TensorBoard" in cli.stdout.read()
        assert not _alive(child["pid"])
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
