"""aiter's arch-keyed Triton GEMM configs: which (arch, config name, N, K) have a tuned config file.

vLLM 0.33 asks aiter whether a Triton GEMM is tuned for a layer's per-rank (N, K) before it routes the
layer there (``vllm/_aiter_ops.py``):

- ``_triton_gemm_config_is_tuned("GEMM-A8W8_BLOCKSCALE", N, K)`` (behind ``is_triton_gemm_w8a8_tuned``)
  probes ``get_gemm_config(name, M=128, N, K)`` ("any M shape under 1024 should be tuned");
- ``is_triton_blockscale_bpreshuffle_gemm_tuned(N, K)`` probes
  ``get_gemm_config("GEMM-A8W8_BLOCKSCALE_PRESHUFFLED", M=1, N, K)`` ("Fake M value for now").

aiter's ``get_gemm_config`` (``aiter/ops/triton/utils/gemm_config_utils.py`` of the aiter releases vLLM
0.33 calls; the pinned amd-aiter 0.1.7.post2.dev18 predates that module) loads
``{arch}-{config}-N={N}-K={K}.json`` from ``ops/triton/configs/gemm/`` and reports "tuned" when that
specialised file exists AND one of its ``M_LEQ_x`` / ``M_GEQ_x`` buckets (x in 4, 8, ..., 8192) covers the
probed M; falling through to the file's ``"any"`` entry is "not tuned". A file with no such bucket at all
is of the older format - the pinned release's, keyed ``small`` / ``medium_M32`` / ... / ``any`` (or
``any`` alone), with no tuned flag - and is counted tuned by its existence: those are the shapes that
release shipped tuning for, which is what the probe asks. That is a reading, not aiter's code (a vLLM 0.33
running against that very release finds no ``gemm_config_utils`` and treats every shape as untuned, and a
newer aiter would call an ``any``-only file untuned); a folder of bucketed files gets aiter's rule exactly.

File names start with aiter's device name for the architecture (``MI300X`` for gfx942, ``MI350X`` for
gfx950: the pinned release's ``arch_info._ARCH_TO_DEVICE``) or, in newer releases, the gfx name itself
(``gfx950-...``, ``gfx1250-...``); both map to the arch `Platform.arch` names. A file whose name follows
the pattern with a device name we do not know is listed in ``ignored`` with the reason (it cannot be
keyed to a platform); a file that is not valid JSON, or not a JSON object, is an error naming it.

`TritonConfigTable.default()` is the table of the pinned release (`pinned_release`, embedded facts checked
against the installed package by the tests): eleven MI350X ``GEMM-A8W8_BLOCKSCALE`` shapes, no
``GEMM-A8W8_BLOCKSCALE_PRESHUFFLED`` file at all and nothing for gfx1250 - so, by default, vLLM 0.33's
preshuffle path never triggers. `TritonConfigTable.from_folder(path)` reads a folder of aiter's JSON files
(a newer aiter's ``configs/gemm``, or hand-made files) so a scenario can model a release that ships them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import real_aiter
from .triton_config_facts import PINNED_BLOCKSCALE_SHAPES
from .tuned_files import path_list

if TYPE_CHECKING:
    from .platforms import Platform

BLOCKSCALE = "GEMM-A8W8_BLOCKSCALE"
BLOCKSCALE_PRESHUFFLED = "GEMM-A8W8_BLOCKSCALE_PRESHUFFLED"
# The M each vLLM 0.33 probe asks aiter about (vllm/_aiter_ops.py, see the module docstring).
PROBE_M = {BLOCKSCALE: 128, BLOCKSCALE_PRESHUFFLED: 1}
# aiter gemm_config_utils.STANDARD_M_BOUNDS: the only bucket bounds get_gemm_config searches.
STANDARD_M_BOUNDS = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

_NAME = re.compile(r"^(?P<prefix>[A-Za-z0-9]+)-(?P<config>.+)-N=(?P<n>\d+)-K=(?P<k>\d+)\.json$")
_BUCKET = re.compile(r"^M_(?P<side>LEQ|GEQ)_(?P<bound>\d+)$")
_GFX = re.compile(r"^gfx[0-9a-f]+$")
# The pinned release's arch_info._ARCH_TO_DEVICE, inverted: the device name a file starts with -> arch.
DEVICE_ARCH = {device: arch for arch, device in real_aiter.DEVICE_BY_ARCH.items()}


def arch_of_prefix(prefix: str) -> str | None:
    """The arch a config file's prefix names: aiter's device name (MI300X, MI350X) or a gfx name; None
    for a device name the pinned release does not map."""
    if _GFX.match(prefix):
        return prefix
    return DEVICE_ARCH.get(prefix)


@dataclass(frozen=True)
class TritonConfig:
    """One specialised config file: its arch, config name, (N, K), the keys it holds and where it came
    from. ``buckets`` says whether the keys are aiter's M_LEQ/M_GEQ buckets (newer releases) or the older
    named sizes."""

    arch: str
    config: str
    n: int
    k: int
    keys: tuple[str, ...]
    source: str

    @property
    def buckets(self) -> bool:
        return any(_BUCKET.match(key) for key in self.keys)

    def tuned_at(self, m: int) -> bool:
        """Whether this file answers "tuned" for a GEMM of M rows (see the module docstring)."""
        if not self.buckets:
            return True
        for bound in STANDARD_M_BOUNDS:
            if m <= bound and f"M_LEQ_{bound}" in self.keys:
                return True
        return any(m >= bound and f"M_GEQ_{bound}" in self.keys for bound in reversed(STANDARD_M_BOUNDS))


@dataclass(frozen=True)
class IgnoredFile:
    """A file that follows aiter's naming but cannot be keyed to an arch, and why."""

    path: str
    reason: str


class TritonConfigTable:
    """Which (arch, config name, N, K) have a tuned aiter Triton config; ``source`` says where from.

    >>> table = TritonConfigTable.default()
    >>> table.tuned("mi355x", BLOCKSCALE, 2112, 7168)      # probed at M=128, as vLLM 0.33 does
    True
    """

    def __init__(self, configs: Iterable[TritonConfig], source: str, ignored: Iterable[IgnoredFile] = ()):
        self.source = source
        self.ignored = list(ignored)
        self._index: dict[tuple[str, str, int, int], TritonConfig] = {}
        for config in configs:
            key = (config.arch, config.config, config.n, config.k)
            held = self._index.get(key)
            if held is not None and held != config:
                raise ValueError(
                    f"aiter Triton configs: two files for {config.config} N={config.n} K={config.k} on "
                    f"{config.arch}: {held.source} and {config.source}"
                )
            self._index[key] = config

    # -- constructors -----------------------------------------------------------------------------
    @classmethod
    def pinned_release(cls) -> TritonConfigTable:
        """The block-scale configs the pinned amd-aiter ships (embedded facts; no package needed)."""
        configs = [
            TritonConfig(arch, BLOCKSCALE, n, k, keys, f"amd-aiter {real_aiter.PINNED_VERSION} (embedded)")
            for (arch, n, k), keys in sorted(PINNED_BLOCKSCALE_SHAPES.items())
        ]
        return cls(configs, f"aiter Triton configs of amd-aiter {real_aiter.PINNED_VERSION} (embedded)")

    @classmethod
    def default(cls) -> TritonConfigTable:
        """`pinned_release()`: the same answer on every machine, whatever aiter is installed."""
        return cls.pinned_release()

    @classmethod
    def from_folder(cls, paths: str | os.PathLike | Iterable[str | os.PathLike]) -> TritonConfigTable:
        """Every ``{ARCH}-{CONFIG}-N={N}-K={K}.json`` in the folder(s) (or the files given); ``:``-separated
        paths as in aiter's env vars. Other files (aiter's per-arch defaults) are not tuning and are skipped."""
        items = path_list(paths, "TritonConfigTable.from_folder")
        files: list[Path] = []
        for item in items:
            path = Path(item).expanduser()
            if path.is_dir():
                files += sorted(p for p in path.iterdir() if p.is_file() and _NAME.match(p.name))
            elif path.is_file():
                if not _NAME.match(path.name):
                    raise ValueError(
                        f"aiter Triton config {path}: the name must be {{ARCH}}-{{CONFIG}}-N={{N}}-K={{K}}.json "
                        "(aiter's naming of a specialised config)"
                    )
                files.append(path)
            else:
                raise FileNotFoundError(f"aiter Triton configs: {path} does not exist")
        configs, ignored = [], []
        for file in files:
            parsed = read_config_file(file)
            if isinstance(parsed, IgnoredFile):
                ignored.append(parsed)
            else:
                configs.append(parsed)
        where = items[0] if len(items) == 1 else f"{len(items)} paths"
        return cls(configs, f"aiter Triton configs in {where}", ignored)

    @classmethod
    def from_installed_aiter(cls) -> TritonConfigTable:
        """The installed pinned amd-aiter's own ``ops/triton/configs/gemm`` folder (AiterUnavailable without it)."""
        install = real_aiter.require_install()
        table = cls.from_folder(install.package_dir / "ops" / "triton" / "configs" / "gemm")
        table.source = f"aiter Triton configs of installed {install.describe()}"
        return table

    # -- queries ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return f"<TritonConfigTable {len(self)} files from {self.source}>"

    def config(self, arch: str, config: str, n: int, k: int) -> TritonConfig | None:
        return self._index.get((arch, config, int(n), int(k)))

    def tuned(self, platform: Platform | str, config: str, n: int, k: int, m: int | None = None) -> bool:
        """Whether aiter reports a tuned `config` for (N, K) on the platform's arch at `m` (default: the
        M vLLM 0.33 probes that config with, `PROBE_M`)."""
        from .platforms import platform as get_platform

        if m is None:
            if config not in PROBE_M:
                raise ValueError(f"no probe M is known for {config!r}; pass m= (known: {', '.join(PROBE_M)})")
            m = PROBE_M[config]
        found = self.config(get_platform(platform).arch, config, n, k)
        return found is not None and found.tuned_at(m)

    def shapes(self, arch: str | None = None, config: str | None = None) -> set[tuple[str, str, int, int]]:
        """Distinct (arch, config, N, K) keys, optionally for one arch and/or config name."""
        return {key for key in self._index if (arch is None or key[0] == arch) and (config is None or key[1] == config)}


def read_config_file(path: Path) -> TritonConfig | IgnoredFile:
    """One specialised config file, or IgnoredFile when its device name maps to no arch; ValueError naming
    the file when it is not a JSON object."""
    match = _NAME.match(path.name)
    if match is None:
        raise ValueError(f"aiter Triton config {path}: not named {{ARCH}}-{{CONFIG}}-N={{N}}-K={{K}}.json")
    arch = arch_of_prefix(match["prefix"])
    if arch is None:
        known = ", ".join(sorted(DEVICE_ARCH))
        return IgnoredFile(
            str(path), f"device name {match['prefix']!r} maps to no arch (known: {known}, or a gfx name)"
        )
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"aiter Triton config {path}: not valid JSON ({err})") from None
    if not isinstance(content, dict) or not content:
        raise ValueError(
            f"aiter Triton config {path}: must be a non-empty JSON object of M buckets, got {type(content).__name__}"
        )
    return TritonConfig(arch, match["config"], int(match["n"]), int(match["k"]), tuple(content), str(path))
