"""One way the tests launch a script under torchrun (gloo on CPU): the checkout and this folder on
PYTHONPATH (so ranks import mla_debug and the tests' model helpers), one OpenMP thread per rank, and
torchrun's log folders in a temporary folder of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def torchrun(script: Path | str, nproc: int, *args: str, paths: tuple[str, ...] = (), timeout: float = 300):
    """Run `script` (a file, or a module name run as with ``-m``) at `nproc` ranks with `paths` also on
    PYTHONPATH; the finished process, whatever its status."""
    path = [str(REPO), str(TESTS), *paths, os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path)), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    command += [str(script)] if isinstance(script, Path) else ["-m", script]
    with tempfile.TemporaryDirectory(prefix="mla-debug-torchrun-") as tmp:
        return subprocess.run(
            [*command, *args], env={**env, "TMPDIR": tmp}, capture_output=True, text=True, timeout=timeout
        )


def run_torchrun(script: Path | str, nproc: int, *args: str, paths: tuple[str, ...] = (), timeout: float = 300) -> str:
    """`torchrun`, which must succeed; its stdout."""
    done = torchrun(script, nproc, *args, paths=paths, timeout=timeout)
    if done.returncode != 0:
        name = getattr(script, "name", script)
        raise AssertionError(f"torchrun {name} at TP{nproc} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done.stdout
