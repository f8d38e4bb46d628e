"""Single functions of the released engines, loaded from their wheels for byte-exact cross-checks.

A wheel file is unzipped into a temporary folder (`engine_wheels.extract`) and only the named top-level
functions are compiled from it (`mla_debug.real_aiter.source.load_functions`), against a namespace the test
gives: the engines' modules import their whole runtime (vLLM's compiled extension, SGLang's server) at
import, which cannot run here, while the functions themselves are plain torch or Triton. Tracebacks and
Triton's source lookup point at the unzipped file. A test calling `load` is skipped (with the fetch command)
when the wheel is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import engine_wheels
import pytest

from mla_debug.real_aiter.source import load_functions


def load(
    package: str, member: str, names: Iterable[str], namespace: Mapping[str, Any], folder: Path
) -> dict[str, Callable]:
    """{name: function} of `member` (e.g. ``sglang/srt/layers/quantization/fp8_utils.py``) of `package`'s wheel."""
    engine_wheels.require(package)
    path = folder / member
    if not path.is_file():
        engine_wheels.extract(package, [member], folder)
    return load_functions(path, names, namespace)


@pytest.fixture(scope="session")
def wheel_folder(tmp_path_factory) -> Path:
    """One folder per test session for the unzipped engine files."""
    return tmp_path_factory.mktemp("engine-files")


def interpreter_semantics():
    """Where the engines' Triton kernels run interpreted on the CPU, compiled Triton's rounding of downcasts
    (tests/aiter_reference/interpreter_casts.py, loaded by path); on a CUDA GPU nothing changes."""
    import contextlib
    import importlib.util

    import torch

    if torch.cuda.is_available():
        return contextlib.nullcontext()
    path = Path(__file__).resolve().parents[1] / "aiter_reference" / "interpreter_casts.py"
    spec = importlib.util.spec_from_file_location("interpreter_casts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compiled_semantics()


def triton_device():
    """The CUDA GPU when there is one, else the CPU under Triton's interpreter (skips when neither works)."""
    import torch

    pytest.importorskip("triton")
    if torch.cuda.is_available():
        return torch.device("cuda")
    from mla_debug.gpu import triton_env

    if not triton_env.interpreting() or triton_env.interpreter_error():
        pytest.skip("no CUDA GPU and Triton's interpreter is not usable in this process")
    return torch.device("cpu")
