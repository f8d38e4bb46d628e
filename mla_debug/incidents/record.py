"""An incident of the public record as data: ``data/incidents/NAME.yaml`` read into an `Incident`.

A file says what happened (source threads and fixes, engine, platform, model, parallel configuration,
symptom, mechanism, fix, workaround - and what the record does not confirm), how mla_debug reproduces it
(``reproduce``: a triage of a scenario, a planted capture pair, or one op's operands; see
`incidents.run`), and the diagnosis the tool must give (``expected``), which the run compares with what
the tool derives. Nothing here runs anything: the record is plain, validated data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INCIDENTS = "incidents"
SCOPES = ("attention", "moe")
REPRODUCTIONS = ("triage", "capture", "operands")
_TOP_KEYS = (
    "name",
    "title",
    "scope",
    "source",
    "engine",
    "platform",
    "model",
    "parallel",
    "symptom",
    "mechanism",
    "fix",
    "workaround",
    "unconfirmed",
    "stand_in",
    "thread_reported",
    "reproduce",
    "expected",
    "notes",
)
_OPTIONAL = ("workaround", "unconfirmed", "stand_in", "notes")
_REQUIRED = tuple(key for key in _TOP_KEYS if key not in _OPTIONAL)
_MECHANISM_KEYS = ("tensor", "contract", "producer", "consumer")
_THREAD_KEYS = ("step", "kind", "fix", "workaround")


class IncidentFileError(ValueError):
    """An incident file that does not follow the schema; the message names the file and the key."""


def _text(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise IncidentFileError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return " ".join(value.split())


def _texts(where: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise IncidentFileError(f"{where}: {key} must be a list of strings, got {type(value).__name__}")
    return tuple(_text(where, f"{key}[]", v) for v in value)


def _mapping(where: str, key: str, value: Any, keys: tuple[str, ...] | None = None) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise IncidentFileError(f"{where}: {key} must be a mapping, got {type(value).__name__}")
    if keys is not None:
        unknown = sorted(set(value) - set(keys))
        if unknown:
            raise IncidentFileError(f"{where}: {key} has unknown key(s) {', '.join(unknown)}; known: {', '.join(keys)}")
    return value


@dataclass(frozen=True)
class Thread:
    """One public thread: ``owner/repo#N``, its kind (issue / pr), state, date and what it is to the incident."""

    ref: str
    kind: str
    state: str
    date: str
    role: str

    @property
    def url(self) -> str:
        repo, number = self.ref.split("#")
        path = "pull" if self.kind == "pr" else "issues"
        return f"https://github.com/{repo}/{path}/{number}"


@dataclass(frozen=True)
class Incident:
    """One incident file, validated. `reproduce` and `expected` stay mappings: `incidents.run` reads them."""

    name: str
    title: str
    scope: str
    threads: tuple[Thread, ...]
    affected: str
    engine: str
    platform: str
    model: str
    parallel: str
    symptom: str
    mechanism: dict[str, str]
    fix: str
    workaround: str | None
    unconfirmed: tuple[str, ...]
    stand_in: str | None
    thread_reported: dict[str, str]
    reproduce: dict[str, Any]
    expected: dict[str, Any]
    path: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def kinds(self) -> tuple[str, ...]:
        """How mla_debug reproduces it: triage, capture and/or operands, in that order."""
        return tuple(k for k in REPRODUCTIONS if k in self.reproduce)

    @property
    def source(self) -> str:
        """The first thread (the report) and its fix, as ``repo#N``."""
        return ", ".join(t.ref for t in self.threads[:2])


def _thread(where: str, value: Any) -> Thread:
    data = _mapping(where, "source.threads[]", value, ("ref", "kind", "state", "date", "role"))
    ref = _text(where, "ref", data.get("ref"))
    if "#" not in ref or "/" not in ref.split("#")[0] or not ref.split("#")[1].isdigit():
        raise IncidentFileError(f"{where}: thread ref {ref!r} is not owner/repo#N")
    kind = _text(where, "kind", data.get("kind"))
    if kind not in ("issue", "pr"):
        raise IncidentFileError(f"{where}: thread {ref} kind {kind!r} is not issue or pr")
    return Thread(
        ref,
        kind,
        _text(where, "state", data.get("state")),
        str(data.get("date", "")),
        _text(where, "role", data.get("role")),
    )


def parse_incident(data: Any, where: str, path: Path | None = None) -> Incident:
    """An `Incident` from a parsed YAML mapping; IncidentFileError naming `where` and the key otherwise."""
    data = _mapping(where, "the file", data, _TOP_KEYS)
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise IncidentFileError(f"{where}: lacks {', '.join(missing)}")
    name = _text(where, "name", data["name"])
    if path is not None and path.stem != name:
        raise IncidentFileError(f"{where}: name {name!r} is not the file's stem {path.stem!r}")
    scope = _text(where, "scope", data["scope"])
    if scope not in SCOPES:
        raise IncidentFileError(f"{where}: scope {scope!r} is not one of {', '.join(SCOPES)}")
    source = _mapping(where, "source", data["source"], ("threads", "affected"))
    threads = tuple(_thread(where, t) for t in source.get("threads") or ())
    if not threads:
        raise IncidentFileError(f"{where}: source.threads lists no thread")
    mechanism = _mapping(where, "mechanism", data["mechanism"], _MECHANISM_KEYS)
    mech = {k: _text(where, f"mechanism.{k}", mechanism.get(k)) for k in _MECHANISM_KEYS}
    reported = _mapping(where, "thread_reported", data["thread_reported"], _THREAD_KEYS)
    thread = {k: _text(where, f"thread_reported.{k}", reported.get(k)) for k in _THREAD_KEYS}
    reproduce = dict(_mapping(where, "reproduce", data["reproduce"], REPRODUCTIONS))
    if not reproduce:
        raise IncidentFileError(f"{where}: reproduce names no reproduction ({', '.join(REPRODUCTIONS)})")
    expected = dict(_mapping(where, "expected", data["expected"], REPRODUCTIONS))
    if set(expected) != set(reproduce):
        raise IncidentFileError(
            f"{where}: expected covers {sorted(expected)} but reproduce runs {sorted(reproduce)}; each "
            "reproduction states the diagnosis it must give"
        )
    if scope == "moe" and not data.get("stand_in"):
        raise IncidentFileError(
            f"{where}: a moe incident says in stand_in which tensor mla_debug plants the contract on"
        )
    return Incident(
        name=name,
        title=_text(where, "title", data["title"]),
        scope=scope,
        threads=threads,
        affected=_text(where, "source.affected", source.get("affected")),
        engine=_text(where, "engine", data["engine"]),
        platform=_text(where, "platform", data["platform"]),
        model=_text(where, "model", data["model"]),
        parallel=_text(where, "parallel", data["parallel"]),
        symptom=_text(where, "symptom", data["symptom"]),
        mechanism=mech,
        fix=_text(where, "fix", data["fix"]),
        workaround=None if data.get("workaround") is None else _text(where, "workaround", data["workaround"]),
        unconfirmed=_texts(where, "unconfirmed", data.get("unconfirmed")),
        stand_in=None if data.get("stand_in") is None else _text(where, "stand_in", data["stand_in"]),
        thread_reported=thread,
        reproduce=reproduce,
        expected=expected,
        path=path,
        notes=_texts(where, "notes", data.get("notes")),
    )


def incidents_folder() -> Path:
    """``data/incidents`` of the project's data folder (`scenarios.data_folder`)."""
    from ..scenarios import data_folder

    return data_folder() / INCIDENTS


def incident_files() -> dict[str, Path]:
    """name -> ``data/incidents/NAME.yaml``, sorted by name (the folder's README and scenario files aside)."""
    folder = incidents_folder()
    if not folder.is_dir():
        return {}
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def load_incident(name_or_path: str | os.PathLike) -> Incident:
    """An incident by name (``data/incidents/NAME.yaml``) or by path."""
    import yaml

    text = str(name_or_path)
    path = Path(text) if text.endswith((".yaml", ".yml")) else incident_files().get(text)
    if path is None:
        known = ", ".join(incident_files()) or "(none)"
        raise KeyError(f"no incident named {text!r}; known: {known}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise IncidentFileError(f"{path}: not YAML ({err})") from None
    return parse_incident(data, str(path), path)


def incident_names() -> list[str]:
    return list(incident_files())
