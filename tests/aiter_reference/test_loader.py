"""The real-aiter loader: the pinned release only, never aiter/__init__.py, nothing left behind."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (the dev extra)
    import tomli as tomllib
from aiter_ref import require_aiter

from mla_debug import real_aiter
from mla_debug.real_aiter import install

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_lookup():
    install._lookup.cache_clear()
    yield
    install._lookup.cache_clear()


def test_the_pin_is_the_same_everywhere():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pin = f"amd-aiter=={real_aiter.PINNED_VERSION}"
    assert project["optional-dependencies"]["aiter"] == [pin]
    assert pin in project["optional-dependencies"]["dev"]  # make test installs it
    assert f"- {pin}" in (REPO / "environment.yml").read_text()


def test_finds_the_pinned_install():
    found = require_aiter()
    assert found.version == real_aiter.PINNED_VERSION
    assert (found.package_dir / "__init__.py").is_file() and found.path("ops/shuffle.py").is_file()
    with pytest.raises(real_aiter.AiterUnavailable, match="has no ops/nope.py"):
        found.path("ops/nope.py")


class _FakeDistribution:
    version = "0.1.9"
    files = ()


def test_another_release_is_refused_with_the_reason(monkeypatch, fresh_lookup):
    monkeypatch.setattr(install.importlib.metadata, "distribution", lambda name: _FakeDistribution())
    with pytest.raises(real_aiter.AiterUnavailable) as err:
        real_aiter.require_install()
    message = str(err.value)
    assert "amd-aiter 0.1.9 is installed" in message and real_aiter.PINNED_VERSION in message
    assert "pip install 'amd-aiter==0.1.7.post2.dev18'" in message
    assert real_aiter.find_install() is None and real_aiter.unavailable_reason() == message
    with pytest.raises(real_aiter.AiterUnavailable, match="0.1.9"):
        real_aiter.load_module("aiter.ops.shuffle", "gfx942")  # an arch never loaded before: it must look


def test_the_unrelated_pypi_aiter_is_refused(monkeypatch, fresh_lookup):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    class Spec:
        origin = "/somewhere/aiter/__init__.py"

    monkeypatch.setattr(install.importlib.metadata, "distribution", missing)
    monkeypatch.setattr(install.importlib.util, "find_spec", lambda name: Spec())
    assert "unrelated PyPI package 'aiter'" in real_aiter.unavailable_reason()
    monkeypatch.setattr(install.importlib.util, "find_spec", lambda name: None)
    install._lookup.cache_clear()
    assert real_aiter.unavailable_reason().startswith("amd-aiter is not installed")


def test_bad_module_names_and_arches():
    with pytest.raises(ValueError, match="not an aiter module"):
        real_aiter.load_module("torch")
    with pytest.raises(ValueError, match="arch 'gfx90a'"):
        real_aiter.load_module("aiter.ops.shuffle", "gfx90a")


LOADS_WITHOUT_INIT = """
import sys
import torch
executed = []
sys.addaudithook(lambda event, args: executed.append(args[0].co_filename) if event == "exec" and hasattr(args[0], "co_filename") else None)
sentinel = type(sys)("aiter")  # what a real `import aiter` would have put there
sys.modules["aiter"] = sentinel
from mla_debug import real_aiter
from mla_debug.real_aiter import functions
init = str(real_aiter.require_install().package_dir / "__init__.py")
functions.shuffle_weight()
functions.torch_group_quant("gfx942")
functions._core_functions()
real_aiter.load_module("aiter.ops.triton.fused_fp8_quant", "gfx950")
gemm = real_aiter.load_module("aiter.ops.triton.gemm_a8w8_blockscale", "gfx942")
assert init not in executed, "aiter/__init__.py was executed"
assert sys.modules["aiter"] is sentinel
assert [name for name in sys.modules if name.startswith("aiter.")] == []
assert gemm._get_config.__module__ == "aiter.ops.triton._triton_kernels.gemm_a8w8_blockscale"
print("ok")
"""


def test_loads_without_running_aiter_init_and_leaves_sys_modules_as_it_was():
    require_aiter()
    pytest.importorskip("triton")
    done = subprocess.run(
        [sys.executable, "-c", LOADS_WITHOUT_INIT], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_each_architecture_gets_aiter_config_choice_for_its_gpu():
    require_aiter()
    pytest.importorskip("triton")
    mi300 = real_aiter.load_module("aiter.ops.triton.utils._triton.arch_info", "gfx942")
    mi350 = real_aiter.load_module("aiter.ops.triton.utils._triton.arch_info", "gfx950")
    assert mi300 is not mi350
    assert (mi300.get_device(), mi350.get_device()) == ("MI300X", "MI350X")
    assert real_aiter.load_module("aiter.ops.triton.utils._triton.arch_info", "gfx942") is mi300
