"""Every Python example of the documentation runs verbatim, the way a reader pasting it would run it.

A page's ```python blocks read as one session (later blocks use what earlier ones defined), so they run
in page order as one script. A block with an `if __name__ == "__main__":` guard is a complete script of
its own (the distributed executor's ranks re-import the script that started them) and runs alone, as a
file. Each runs in a fresh python in an empty folder, so whatever the examples write (reports, traces,
captures) lands there and the checkout stays as it was. Blocks that cannot run here (the serving-engine
recipes) are ```text blocks and are not run. Some pages also promise an output; those promises are
checked below.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
GUARD = 'if __name__ == "__main__":'


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def pages_with_examples() -> list[Path]:
    return [path for path in sorted(DOCS.glob("*.md")) if python_blocks(path)]


def run_script(code: str, folder: Path, name: str) -> subprocess.CompletedProcess:
    script = folder / name
    script.write_text(code)
    env = dict(os.environ)
    # A reader's shell has no interpreter switched on (tests/conftest.py sets it for the Triton tests).
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # The timeout only keeps a hung rank from hanging the suite.
    return subprocess.run([sys.executable, name], cwd=folder, env=env, capture_output=True, text=True, timeout=1800)


def check_layer(folder: Path, out: str) -> None:
    assert "absorb_uk" in out  # the step-by-step printout reached the decode steps


def check_triage(folder: Path, out: str) -> None:
    assert (folder / "triage.html").stat().st_size > 0 and (folder / "triage.json").stat().st_size > 0
    assert (folder / "triage.html").read_bytes() == (folder / "triage-again.html").read_bytes()


def check_profiling(folder: Path, out: str) -> None:
    traces = [f for f in (folder / "profiles").iterdir() if (f / "mla_debug_meta.json").is_file()]
    assert len(traces) == 2  # both profiled runs


def check_capture(folder: Path, out: str) -> None:
    assert sorted(p.name for p in (folder / "captures" / "tp1").iterdir()) == ["rank0-of-1"]
    assert "kv_b_proj" in out  # the explanation's lines name the step it explains


# What a page's examples promise beyond running without an error.
PROMISES = {
    "layer.md": check_layer,
    "triage.md": check_triage,
    "profiling.md": check_profiling,
    "capture.md": check_capture,
}


def test_the_pages_with_promises_have_examples():
    assert set(PROMISES) <= {path.name for path in pages_with_examples()}


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_with_examples(), ids=lambda path: path.name)
def test_a_pages_examples_run_in_order(page, tmp_path):
    session = [block for block in python_blocks(page) if GUARD not in block]
    done = run_script("\n".join(session), tmp_path, "page_session.py")
    assert done.returncode == 0, f"docs/{page.name}:\n{done.stderr[-4000:]}"
    if page.name in PROMISES:
        PROMISES[page.name](tmp_path, done.stdout)


@pytest.mark.slow
def test_the_distributed_script_runs_as_a_file(tmp_path):
    scripts = [block for page in pages_with_examples() for block in python_blocks(page) if GUARD in block]
    assert len(scripts) == 1  # docs/layer.md's
    done = run_script(scripts[0], tmp_path, "tp_run.py")
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "True"  # distributed and in-process runs bitwise equal
