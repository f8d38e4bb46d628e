"""Whether a hazard file's failure can happen in the release it is built on, and the code that says so.

A hazard (``data/engines/hazards/*.yaml``) is a release profile with one thing changed; the change may be
something the release itself does under some settings, something it will do once an outside input
changes (a config aiter ships), or something no code in the release does at all. ``reachable`` in the
file says which, with the lines of the release that show it::

    reachable:
      verdict: latent                 # reachable | latent | what-if
      tp_dependent: true              # whether the failure depends on the TP size
      says: the day aiter ships a preshuffle config for kv_b_proj's per-rank shape
      evidence:
        - says: the MLA post-load runs after every linear's
          source: {package: vllm, version: 0.33.0, file: ..., function: ..., lines: "198-206"}

The key belongs to the file that makes the claim: a scenario built on a hazard (``base:``) does not
inherit it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._json_records import JsonRecord
from .._str_enum import StrEnum
from .checks import reject_unknown, string, type_error
from .citations import Source, parse_source


class Reach(StrEnum):
    """How the release reaches a hazard."""

    REACHABLE = "reachable"  # the release's own code, with settings a user can choose
    LATENT = "latent"  # the release's code, once an input outside it changes (a config aiter ships)
    WHAT_IF = "what-if"  # no code path of the release: a model of a fork or a future producer


@dataclass(frozen=True)
class Evidence(JsonRecord):
    """One place of the release that shows the verdict, in words."""

    says: str
    source: Source


@dataclass(frozen=True)
class Reachability(JsonRecord):
    """A hazard's verdict about its release, whether it depends on the TP size, and the evidence."""

    verdict: Reach
    tp_dependent: bool
    says: str
    evidence: tuple[Evidence, ...]

    @property
    def what_if(self) -> bool:
        return self.verdict is Reach.WHAT_IF

    def __str__(self) -> str:
        tp = "depends on the TP size" if self.tp_dependent else "at every TP size"
        return f"{self.verdict}: {self.says} ({tp})"


KEYS = ("verdict", "tp_dependent", "says", "evidence")


def parse_reachability(where: str, value: Any) -> Reachability:
    """A `Reachability` from the ``reachable`` mapping; every key is required and every evidence cites
    its lines."""
    if not isinstance(value, Mapping):
        raise type_error(where, "reachable", value, "a mapping {verdict, tp_dependent, says, evidence}")
    reject_unknown(where, "reachable key(s)", value, list(KEYS))
    missing = [key for key in KEYS if key not in value]
    if missing:
        raise ValueError(f"{where}: reachable lacks {', '.join(missing)}; it has {', '.join(KEYS)}")
    verdicts = [r.value for r in Reach]
    if value["verdict"] not in verdicts:
        raise ValueError(f"{where}: reachable.verdict {value['verdict']!r} is not one of {', '.join(verdicts)}")
    if not isinstance(value["tp_dependent"], bool):
        raise type_error(where, "reachable.tp_dependent", value["tp_dependent"], "a bool (true or false)")
    says = string(where, "reachable.says", value["says"], "a non-empty string")
    items = value["evidence"]
    if not isinstance(items, list) or not items:
        raise type_error(where, "reachable.evidence", items, "a non-empty list of {says, source}")
    evidence = []
    for i, item in enumerate(items):
        at = f"{where}: reachable.evidence[{i}]"
        if not isinstance(item, Mapping):
            raise type_error(at, "evidence", item, "a mapping {says, source}")
        reject_unknown(at, "key(s)", item, ["says", "source"])
        if "says" not in item or "source" not in item:
            raise ValueError(f"{at}: an evidence has says and source")
        source = parse_source(at, item["source"])
        if not source.lines:
            raise ValueError(f"{at}: the source cites no lines; evidence names the lines that show it")
        evidence.append(Evidence(string(at, "says", item["says"], "a non-empty string"), source))
    return Reachability(Reach(value["verdict"]), value["tp_dependent"], says, tuple(evidence))
