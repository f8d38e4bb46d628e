"""Importing aiter's own modules (its Triton kernels among them) without executing ``aiter/__init__.py``.

aiter's Triton modules import each other absolutely (``from aiter.ops.triton._triton_kernels... import``)
and read ``aiter.dtypes.fp8`` at import, so they must be imported as the package ``aiter``. `load_module`
imports them under a stand-in ``aiter`` package object whose ``__path__`` is the installed package folder
(so every submodule is aiter's real file) and whose only attribute is ``dtypes``, the one thing those
modules read from the package itself. The stand-in lives in ``sys.modules`` only while the import runs;
the previous entries (a real ``import aiter`` on ROCm, say) are put back afterwards, so nothing the user
imports changes. The loaded modules keep working through their own globals.

One isolated set of modules is kept per architecture the code stands for, because aiter's Triton GEMM
picks its configs from the GPU it believes it runs on (``arch_info.get_arch``, which asks the driver and
knows only gfx942 and gfx950): in each set that function answers the architecture of the set, so aiter's
own config choice for an MI300X or an MI350X runs on any machine.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import threading
import types

import torch

from .install import require_install

# aiter/utility/dtypes.py (amd-aiter 0.1.7.post2.dev18, `defaultDtypes`): the fp8 type per architecture.
FP8_BY_ARCH = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
# aiter/ops/triton/utils/_triton/arch_info.py (same release, `_ARCH_TO_DEVICE`): the config-file prefix.
DEVICE_BY_ARCH = {"gfx942": "MI300X", "gfx950": "MI350X"}
ARCH_INFO = "aiter.ops.triton.utils._triton.arch_info"

_lock = threading.Lock()
_sets: dict[str, dict[str, types.ModuleType]] = {}


def _is_aiter(name: str) -> bool:
    return name == "aiter" or name.startswith("aiter.")


def _stand_in_package(arch: str) -> types.ModuleType:
    package_dir = str(require_install().package_dir)
    package = types.ModuleType("aiter", "stand-in for aiter/__init__.py (not executed); see mla_debug.real_aiter")
    package.__path__ = [package_dir]
    package.__spec__ = importlib.machinery.ModuleSpec("aiter", None, is_package=True)
    package.__spec__.submodule_search_locations = [package_dir]
    dtypes = types.ModuleType("aiter.dtypes", "the fp8 type aiter/utility/dtypes.py gives this architecture")
    dtypes.fp8 = FP8_BY_ARCH[arch]
    package.dtypes = dtypes
    return package


def load_module(name: str, arch: str = "gfx950") -> types.ModuleType:
    """aiter's module `name` (``"aiter.ops.triton.fused_fp8_quant"``), imported from the pinned install
    as it would run on `arch` ("gfx942": MI300X, "gfx950": MI350X/MI355X).

    Raises `AiterUnavailable` without the pinned amd-aiter; ImportError from the module itself (no triton,
    say) passes through.
    """
    if not _is_aiter(name):
        raise ValueError(f"load_module: {name!r} is not an aiter module name")
    if arch not in FP8_BY_ARCH:
        raise ValueError(f"load_module: arch {arch!r} is not one aiter's Triton code knows ({', '.join(FP8_BY_ARCH)})")
    require_install()  # every time: cached modules of a release no longer installed are not served
    with _lock:
        loaded = _sets.setdefault(arch, {})
        if name in loaded:
            return loaded[name]
        if "aiter" not in loaded:
            loaded["aiter"] = _stand_in_package(arch)
        saved = {key: module for key, module in sys.modules.items() if _is_aiter(key)}
        for key in saved:
            del sys.modules[key]
        sys.modules.update(loaded)
        try:
            module = importlib.import_module(name)
        finally:
            loaded.update({key: mod for key, mod in sys.modules.items() if _is_aiter(key)})
            for key in [key for key in sys.modules if _is_aiter(key)]:
                del sys.modules[key]
            sys.modules.update(saved)
        arch_info = loaded.get(ARCH_INFO)
        if arch_info is not None:
            # Where aiter asks the driver which GPU it is on, the set answers the architecture it stands for.
            arch_info.get_arch = lambda: arch
        return module
