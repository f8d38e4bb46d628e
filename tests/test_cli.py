"""The command line and the demo, run in-process."""

from __future__ import annotations

import subprocess
import sys

from mla_debug.cli import main


def test_demo_reproduces_the_three_bugs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    m16 = [line for line in lines if line.strip().startswith("16  aiter-bpreshuffle")]
    assert any("ROW_MAJOR" in line and line.rstrip().endswith("WRONG") for line in m16)
    assert any("COL_MAJOR" in line and line.rstrip().endswith("ok") for line in m16)
    m1 = [line for line in lines if line.strip().startswith("1  aiter-bpreshuffle")]
    assert m1 and all(" ok" in line for line in m1)
    assert "shuffled 2 times with (16, 16)" in out
    assert "PR #51692 (flag ignored)" in out and "PR #56433 (flag honoured): weight plain" in out
    assert out.count("WRONG") == 3


def test_kernels_lists_every_kernel_with_its_flags(capsys):
    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    for name in ("torch-reference", "aiter-blockscale", "aiter-bpreshuffle", "cublas-blockwise"):
        assert name in out
    bpre = next(line for line in out.splitlines() if line.startswith("aiter-bpreshuffle "))
    assert bpre.split()[1:3] == ["yes", "yes"]


def test_select_explains_the_choice(capsys):
    assert main(["select", "3072x1536", "24576x1536", "--platform", "mi355x", "--layer", "q_b_proj", "--emulated"]) == 0
    out = capsys.readouterr().out
    assert "q_b_proj N=3072 K=1536: aiter-bpreshuffle" in out
    assert "q_b_proj N=24576 K=1536: aiter-blockscale" in out
    assert main(["select", "3072x1536", "--platform", "mi355x", "--before-pr51692", "--emulated"]) == 0
    assert "aiter-blockscale" in capsys.readouterr().out


def test_bad_input_is_a_clear_error(capsys):
    assert main(["select", "3072x1536", "--platform", "mi250"]) == 2
    assert "unknown platform 'mi250'; valid: cpu" in capsys.readouterr().err
    assert main(["select", "3072x1536", "--tuned", "/nonexistent/tuned.csv"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_module_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "mla_debug.cli", "kernels"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "aiter-bpreshuffle" in result.stdout
