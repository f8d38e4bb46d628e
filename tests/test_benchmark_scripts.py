"""Every benchmark script with a command line starts and documents itself on a machine without a GPU.

The benchmarks only run on a CUDA machine, where a broken import costs a device session to find; `--help`
runs each script's imports and argument parser and nothing else, so CI catches a renamed module or a
script that reads the GPU before parsing its arguments.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if "argparse" in p.read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_script_starts_and_prints_its_usage(script):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=script.parent, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
