"""SGLang 0.5.23's own dumper and comparator (``sglang/srt/debug_utils/``), importable without SGLang's runtime.

The tests run SGLang's released code, unmodified: the folder is unzipped from the wheel that ``make test``
fetches (tests/engine_wheels.py) into ``build/sglang-0.5.23/`` (ignored by git, made once, whole or not at
all) and put on ``sys.path`` / ``PYTHONPATH``; nothing is installed. The comparator needs only pure-Python
packages and polars (the dev extra); the dumper imports three runtime modules whose functions the paths
used here never call - its HTTP/ZMQ control server (off unless ``DUMPER_SERVER_PORT`` is set) and the
SGLang plugin's parallel-state lookups (disabled when SGLang's distributed package is absent). Those three
are replaced by the small stand-ins below, which raise if anything does call them; SGLang's own
``sglang/__init__.py`` (which starts the whole runtime) is left out, so ``sglang`` is a namespace package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import engine_wheels

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "build" / f"sglang-{engine_wheels.RELEASES['sglang']}"
PREFIX = "sglang/srt/debug_utils/"

_STANDINS = {
    "sglang/srt/managers/io_struct.py": '''"""Stand-in for SGLang's io_struct: only the dumper's control server (off here) uses these."""


def _absent(*args, **kwargs):
    raise RuntimeError("SGLang's runtime is not installed here: the dumper's HTTP/ZMQ control is unavailable")


sock_recv = sock_send = wrap_as_pickle = _absent
''',
    "sglang/srt/runtime_context.py": '''"""Stand-in for SGLang's runtime_context: no server is running, so there is no parallel state."""


def _absent(*args, **kwargs):
    raise RuntimeError("no SGLang server runs in this process")


get_parallel = get_server_args = get_serving = _absent
''',
    "sglang/srt/utils/__init__.py": '''"""Stand-in for SGLang's utils: the dumper asks for the device only to broadcast an experiment name."""


def get_device():
    return "cpu"
''',
}


def debug_utils_root() -> Path:
    """The folder to put on sys.path so `import sglang.srt.debug_utils.dumper` finds the released code;
    skips the calling test (via engine_wheels.require) when the wheel is not fetched."""
    engine_wheels.require("sglang")
    marker = FOLDER / ".complete"
    if marker.exists():
        return FOLDER
    archive = engine_wheels._zip("sglang")
    members = [m for m in archive.namelist() if m.startswith(PREFIX) and not m.endswith("/")]
    temporary = FOLDER.with_name(f".{FOLDER.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        engine_wheels.extract("sglang", members, temporary)
        for member, text in _STANDINS.items():
            path = temporary / member
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (temporary / ".complete").write_text("unzipped from the sglang 0.5.23 wheel, with stand-ins\n")
        try:
            temporary.rename(FOLDER)
        except OSError:
            if not marker.exists():  # another process made it meanwhile: keep theirs
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return FOLDER


def environment() -> dict[str, str]:
    """os.environ with the released debug_utils (and the repository) on PYTHONPATH."""
    paths = [str(debug_utils_root()), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def run_comparator(baseline: Path, target: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m sglang.srt.debug_utils.comparator`` on two dump folders, JSON lines on stdout."""
    command = [
        sys.executable, "-m", "sglang.srt.debug_utils.comparator", "--baseline-path", str(baseline),
        "--target-path", str(target), "--output-format", "json", "--report-path", "", *extra,
    ]
    return subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=timeout, cwd=str(target))
