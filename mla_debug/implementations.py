"""Interchangeable implementations of one operation, chosen by name: the GEMM kernels and the norm+quant
backends are described, registered and looked up the same way.

An implementation says, whatever it implements:

- ``name`` - what users type (scenario files, options, the command line); a registry may also know it
  by aliases (vLLM's class name for a kernel);
- ``operation`` - what it implements ("block-scaled FP8 GEMM", "fused_qk_rmsnorm_group_quant");
- ``description`` - one line;
- ``availability(device=None) -> Check`` - whether its code can run in this process, on tensors on
  `device` (None: wherever the caller's tensors are; the answer then covers the process);
- ``can_implement(problem) -> Check`` - whether it takes this problem (a GEMM's shape, format and
  modelled platform; a norm+quant call's validated arguments).

Both answers carry their reason, because choices are explained to the user: the selection code
(`KernelPolicy.select`, the norm+quant ``"auto"``) words its own explanation from them.

A `Registry` holds the implementations of one operation under their names. Looking up a name it does
not hold raises `UnknownImplementation`, whose message lists the registered names (and the keywords,
such as ``"auto"``, that choose among them), so every place that takes a name - scenario files, kernel
policies, the norm+quant op - fails the same clear way. A registry may sit on one below it: its own
entries shadow the lower one's of the same name until removed (user-registered norm+quant backends over
the built-in ones). A new implementation becomes selectable everywhere by registering; nothing else
names it.

This module sits under kernels/ and normquant/ (it imports only torch), so both use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

import torch


class Check(NamedTuple):
    """A yes/no answer and why. A tuple, so ``ok, why = kernel.availability()`` unpacks it."""

    ok: bool
    reason: str


@runtime_checkable
class Implementation(Protocol):
    """What every implementation of an operation tells its registry's users (see the module docstring)."""

    name: str
    operation: str
    description: str

    def availability(self, device: torch.device | None = None) -> Check: ...

    def can_implement(self, problem: Any) -> Check: ...


class UnknownImplementation(ValueError):
    """A name that no implementation in the registry has (the message lists the ones it has)."""


T = TypeVar("T")


class Registry(Generic[T]):
    """The implementations of one operation by name (see the module docstring).

    `noun` / `plural` word the errors ("unknown kernel 'x'; registered kernels: a, b"). `keywords` are
    names that choose among the implementations rather than name one (``"auto"``): `check_name` accepts
    them, `get` does not. `below`: a registry whose entries show through where this one has none.
    Entries are whatever the operation registers (kernel classes, backend records).
    """

    def __init__(
        self,
        operation: str,
        noun: str,
        plural: str | None = None,
        keywords: Iterable[str] = (),
        below: Registry[T] | None = None,
    ) -> None:
        self.operation = operation
        self.noun = noun
        self.plural = plural or f"{noun}s"
        self.keywords = tuple(keywords)
        self.below = below
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<Registry of {self.plural}: {', '.join(self.names())}>"

    # -- registering -------------------------------------------------------------------------------
    def register(self, name: str, entry: T, aliases: Iterable[str] = (), replace: bool = False) -> T:
        """Add `entry` under `name` (and `aliases`); registering the same entry again changes nothing.

        Another entry under a name this registry holds is refused unless `replace`; a name of the
        registry below is shadowed.
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{self.noun} names are non-empty strings, got {name!r}")
        aliases = tuple(alias for alias in aliases if alias and alias != name)
        for taken in (name, *aliases):
            if taken in self.keywords:
                raise ValueError(f"{taken!r} chooses among the {self.plural}; it cannot name one")
        if self._aliases.get(name, name) != name:
            raise ValueError(f"{self.noun} {name!r}: the name is already the {self.noun} {self._aliases[name]!r}'s")
        held = self._entries.get(name)
        if held is not None and held is not entry and not replace:
            raise ValueError(f"a {self.noun} named {name!r} is already registered ({_label(held)})")
        for alias in aliases:
            owner = self._aliases.get(alias, alias if alias in self._entries else None)
            if owner is not None and owner != name:
                raise ValueError(f"{self.noun} {name!r}: the name {alias!r} is already the {self.noun} {owner!r}'s")
        self._entries[name] = entry
        self._aliases = {alias: owner for alias, owner in self._aliases.items() if owner != name}
        self._aliases.update(dict.fromkeys(aliases, name))
        return entry

    def unregister(self, name: str) -> T | None:
        """Remove `name` from this registry (not from the one below, whose entry serves again); the
        removed entry, or None when it held none."""
        self._aliases = {alias: owner for alias, owner in self._aliases.items() if owner != name}
        return self._entries.pop(name, None)

    # -- looking up --------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every registered name (not aliases, not keywords), sorted."""
        return sorted(self._visible())

    def items(self) -> list[tuple[str, T]]:
        """(name, entry) of every registered name, sorted by name; shadowed entries left out."""
        visible = self._visible()
        return [(name, visible[name]) for name in sorted(visible)]

    def find(self, name: str) -> T | None:
        """The entry a name or alias stands for, or None."""
        if not isinstance(name, str):
            return None
        name = self._aliases.get(name, name)
        if name in self._entries:
            return self._entries[name]
        return self.below.find(name) if self.below is not None else None

    def get(self, name: str) -> T:
        """The entry a name or alias stands for; `UnknownImplementation` listing the names otherwise."""
        entry = self.find(name)
        if entry is None:
            raise self.unknown(name)
        return entry

    def canonical(self, name: str) -> str:
        """The registered name for a name or alias (`UnknownImplementation` when there is none)."""
        self.get(name)
        if name in self._aliases:
            return self._aliases[name]
        if name in self._entries or self.below is None:
            return name
        return self.below.canonical(name)

    def check_name(self, name: str) -> str:
        """`canonical(name)`, or a keyword as it is: what a configuration may give for this operation."""
        return name if name in self.keywords else self.canonical(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def unknown(self, name: object) -> UnknownImplementation:
        """The error for a name this registry does not hold (also for callers that looked it up themselves)."""
        listed = f"registered {self.plural}: {', '.join(self.names()) or '(none)'}"
        if self.keywords:
            listed += f" (or {', '.join(repr(keyword) for keyword in self.keywords)})"
        return UnknownImplementation(f"unknown {self.noun} {name!r}; {listed}")

    def _visible(self) -> dict[str, T]:
        lower = self.below._visible() if self.below is not None else {}
        return {**lower, **self._entries}


def _label(entry: object) -> str:
    """How an entry is named in a duplicate-name error: a class by its class name."""
    return entry.__name__ if isinstance(entry, type) else type(entry).__name__
