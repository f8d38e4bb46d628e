"""How a launch configuration names itself: benchmark tables, RESULTS.md and the tuned-config caches
print these names, so every kernel family builds them the same way."""

from __future__ import annotations


def launch_name(base: str, *flags: tuple[bool, str]) -> str:
    """`base` followed by the suffix of each (set, suffix) flag that is set, in the order given."""
    return base + "".join(suffix for is_set, suffix in flags if is_set)
