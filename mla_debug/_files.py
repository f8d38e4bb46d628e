"""Fresh output names and atomic writes: the one place every writer of the package goes through.

Two promises, kept by every report, trace, metadata file and checkpoint the package writes:

- nothing a user already has is overwritten: a taken file name gets a numbered sibling
  (``report.html`` -> ``report-2.html``), a taken folder name likewise (``run`` -> ``run-2``), and a
  writer that was given one exact name (a checkpoint folder, an explicit profile run id) refuses;
- a file or folder appears whole or not at all: content goes to a hidden temporary sibling first and
  is published under its final name in one step, so an interrupted write leaves no partial file.

Publishing a file hard-links the temporary file to the chosen name, which fails when that name was taken
in the meantime (the next free name is tried), so even a concurrent writer is never overwritten. On a
file system without hard links an empty placeholder is created exclusively and the temporary file
renamed over it. This module imports nothing of the package, so every layer can use it.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# How many numbered siblings are tried before giving up (a folder of ten thousand reports of one name
# is a mistake worth an error, not a longer search).
MAX_SIBLINGS = 10_000

# link() errors that mean "this file system has no hard links", not "the name is taken".
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS}


def sibling(path: str | os.PathLike, n: int, suffix: str | None = None) -> Path:
    """The `n`-th numbered sibling of `path`: ``stem-n`` + suffix (n = 1 is `path` itself).

    `suffix` is the part of the name kept at the end (default: the last suffix, ``.html``); a writer
    whose names carry several (``.pt.trace.json.gz``) passes them so the number goes before all.
    """
    path = Path(path)
    if n == 1:
        return path
    suffix = path.suffix if suffix is None else suffix
    if not path.name.endswith(suffix) or path.name == suffix:
        raise ValueError(f"{path.name}: does not end in {suffix!r} after a name")
    return path.with_name(f"{path.name[: len(path.name) - len(suffix)]}-{n}{suffix}")


def _temporary_beside(path: Path, tag: str) -> Path:
    """A hidden name in `path`'s folder that no other writer (process or thread) picks."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.{tag}")


def publish_file(temporary: str | os.PathLike, path: str | os.PathLike, suffix: str | None = None) -> Path:
    """Give the finished file `temporary` the name `path`, or its first free numbered sibling; returns
    the name given. `temporary` (in the same folder) is gone afterwards, whatever happens."""
    temporary, path = Path(temporary), Path(path)
    try:
        for n in range(1, MAX_SIBLINGS + 1):
            target = sibling(path, n, suffix)
            if os.path.lexists(target):
                continue
            try:
                os.link(temporary, target)
                return target
            except FileExistsError:
                continue  # taken since the check: try the next number
            except OSError as err:
                if err.errno not in _NO_HARD_LINKS:
                    raise
            # No hard links here: take the name with an exclusive create, then rename over our own
            # (empty) placeholder - still never over anyone else's file.
            try:
                os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            except FileExistsError:
                continue
            os.replace(temporary, target)
            return target
        raise FileExistsError(f"{path}: no free name among its {MAX_SIBLINGS} numbered siblings")
    finally:
        temporary.unlink(missing_ok=True)


def write_atomically(path: str | os.PathLike, data: str | bytes, suffix: str | None = None) -> Path:
    """Write `data` (text as UTF-8, or bytes) to a new file at `path`, or at its first free numbered
    sibling when `path` is taken; returns the path written. The folder is made when missing.

    The data goes to a temporary file that is published only once complete: on any error (a full disk,
    an interrupt) no file appears at `path` and the temporary file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_beside(path, "tmp")
    try:
        if isinstance(data, str):
            temporary.write_text(data, encoding="utf-8")
        else:
            temporary.write_bytes(data)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return publish_file(temporary, path, suffix)


def create_folder(path: str | os.PathLike) -> Path:
    """Make the folder `path` (and its parents); FileExistsError when anything is already there.
    Taking the name is the atomic check: two writers asking for one name never both get it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkdir(path)
    return path


def fresh_folder(path: str | os.PathLike) -> Path:
    """Make and return a new folder at `path`, or at its first free numbered sibling (``run-2``, ...)."""
    for n in range(1, MAX_SIBLINGS + 1):
        try:
            return create_folder(sibling(path, n, suffix=""))
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}: no free folder name among its {MAX_SIBLINGS} numbered siblings")


def check_new_folder(path: str | os.PathLike, label: str | None = None) -> Path:
    """`path` as a folder a writer of one exact name may fill: absent or empty. FileExistsError
    otherwise, naming it as `label` (default: its path). Writers of large content check this first."""
    out = Path(path).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"{label or out} already exists and is not an empty folder; refusing to overwrite it (choose a new folder)"
        )
    return out


@contextmanager
def folder_atomically(path: str | os.PathLike, label: str | None = None) -> Iterator[Path]:
    """Fill a new folder at exactly `path`: yields a hidden temporary sibling to write into, renamed to
    `path` when the block ends without error and removed otherwise - `path` is complete or absent.

    `path` must be absent or empty (see `check_new_folder`), before and when the rename happens.
    The temporary folder is made with os.mkdir, which honours the umask (tempfile.mkdtemp's 0700 would
    leave a folder others cannot read).
    """
    out = check_new_folder(path, label)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_beside(out, "partial")
    os.mkdir(temporary)
    try:
        yield temporary
        try:
            if out.exists():
                out.rmdir()  # empty (checked above); rename cannot replace a folder portably
            os.rename(temporary, out)
        except OSError as err:
            if err.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise FileExistsError(
                    f"{label or out} was filled by someone else while being written; refusing to overwrite it"
                ) from None
            raise
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
