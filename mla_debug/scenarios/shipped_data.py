"""Where the project's shipped data lives: the ``data/`` folder of the checkout (engine profiles under
``data/engines/``).

The package is installed editable from its checkout (what ``make`` does), so the folder is found beside
the package. The environment variable ``MLA_DEBUG_DATA`` names another folder with the same layout (a
copy next to a wheel install, a folder of one's own profiles); it is read here and nowhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "MLA_DEBUG_DATA"
ENGINES = "engines"
# The project's checkout: mla_debug/scenarios/data_folder.py -> the folder holding mla_debug/.
_CHECKOUT_DATA = Path(__file__).resolve().parents[2] / "data"


def data_folder() -> Path:
    """The project's data folder: ``$MLA_DEBUG_DATA`` when set, else ``data/`` of the checkout the
    package runs from. FileNotFoundError saying both places otherwise."""
    named = os.environ.get(ENV_VAR)
    if named:
        path = Path(named).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"{ENV_VAR}={named} is not a folder; it names the data folder holding engines/")
        return path
    if _CHECKOUT_DATA.is_dir():
        return _CHECKOUT_DATA
    raise FileNotFoundError(
        f"the project's data folder was not found: it is the data/ folder of the checkout ({_CHECKOUT_DATA} "
        f"for this install; `make` installs the package editable from its checkout), or set {ENV_VAR} to a "
        "folder holding engines/"
    )


def engine_profile_files() -> dict[str, Path]:
    """The engine profiles shipped as data: name (the file's stem) -> ``data/engines/NAME.yaml``, sorted
    by name; ValueError when two files share a stem. The hazard examples under ``engines/hazards/`` are
    files to pass by path, not names."""
    folder = data_folder() / ENGINES
    if not folder.is_dir():
        return {}
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in (".yaml", ".yml"))
    named: dict[str, Path] = {}
    for path in files:
        if path.stem in named:
            raise ValueError(f"{folder}: {named[path.stem].name} and {path.name} both name the profile {path.stem!r}")
        named[path.stem] = path
    return named


def profile_names() -> list[str]:
    """The engine profiles in the data folder (``data/engines/*.yaml``), sorted; none when there is no
    data folder or two files share a name (`md.scenario` then says why), so a help text always prints."""
    try:
        return list(engine_profile_files())
    except (FileNotFoundError, ValueError):
        return []
