"""Every Python snippet in README.md runs verbatim, the way a user pasting them would run them.

The snippets read as one session (the traces profile the layer stepped through, the triage reuses the
first block's imports), so they run in README order as one script. A snippet with an
`if __name__ == "__main__":` guard is a complete script of its own (the distributed executor's ranks
re-import the script that started them) and runs alone, as a file. Each runs in a fresh python in an
empty folder, so whatever the snippets write (reports, traces) lands there and the checkout stays as it was.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
GUARD = 'if __name__ == "__main__":'


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.S | re.M)


def run_script(code: str, folder: Path, name: str) -> subprocess.CompletedProcess:
    script = folder / name
    script.write_text(code)
    env = dict(os.environ)
    # A user's shell has no interpreter switched on (tests/conftest.py sets it for the Triton tests).
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # The timeout only keeps a hung rank from hanging the suite.
    return subprocess.run([sys.executable, name], cwd=folder, env=env, capture_output=True, text=True, timeout=1800)


def test_readme_has_the_snippets_this_file_runs():
    blocks = python_blocks()
    assert len(blocks) >= 6, f"README.md: expected the Python snippets, found {len(blocks)} ```python blocks"
    assert sum(GUARD in block for block in blocks) == 1  # the distributed executor's script


@pytest.mark.slow
def test_readme_session_snippets_run_in_order(tmp_path):
    session = [block for block in python_blocks() if GUARD not in block]
    done = run_script("\n".join(session), tmp_path, "readme_session.py")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "absorb_uk" in done.stdout  # the step-by-step printout reached the decode steps
    # The triage reports and both profiled runs went to the folder the snippets ran in.
    assert (tmp_path / "triage.html").stat().st_size > 0 and (tmp_path / "triage.json").stat().st_size > 0
    traces = [folder for folder in (tmp_path / "profiles").iterdir() if (folder / "mla_debug_meta.json").is_file()]
    assert len(traces) == 2


@pytest.mark.slow
def test_readme_distributed_script_runs_as_a_file(tmp_path):
    (script,) = [block for block in python_blocks() if GUARD in block]
    done = run_script(script, tmp_path, "tp_run.py")
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "True"  # distributed and in-process runs bitwise equal
