"""Culprits, remedies and provenance in words: the sentences the HTML report and the terminal share.

Analysis hands over typed data (culprit groups, remedies, a known fix, a Provenance); this module is the
one place that turns them into sentences, so the report and the terminal never say different things.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..triage.changes import DISABLE_KERNEL, SET_SETTING, causes

_MODE_ORDER = ("prefill", "decode")


def _uniform(configs) -> tuple[str, str] | None:
    """('TP4, TP8', 'decode') when every TP size has the same modes, else None."""
    modes_of: dict[int, set[str]] = {}
    for tp, mode in configs:
        modes_of.setdefault(tp, set()).add(mode)
    mode_sets = {frozenset(m) for m in modes_of.values()}
    if len(mode_sets) != 1:
        return None
    modes = sorted(mode_sets.pop(), key=_mode_key)
    return ", ".join(f"TP{tp}" for tp in modes_of), " and ".join(modes)


def _mode_key(mode: str) -> int:
    return _MODE_ORDER.index(mode) if mode in _MODE_ORDER else len(_MODE_ORDER)


def configs_label(configs) -> str:
    """'TP4 decode', 'TP4, TP8 decode', 'TP1, TP2 prefill and decode' or 'TP1 prefill, TP2 decode'."""
    uniform = _uniform(configs)
    if uniform is not None:
        return f"{uniform[0]} {uniform[1]}"
    return ", ".join(f"TP{tp} {mode}" for tp, mode in configs)


def where_and_what(configs) -> tuple[str, str]:
    """('TP4, TP8', 'decode') when every TP size of `configs` has the same modes, else
    ('TP1 prefill, TP2 decode', 'them'): where a culprit struck, and what its remedies restore."""
    return _uniform(configs) or (configs_label(configs), "them")


def group_heading(group) -> str:
    """'kv_b_proj at TP4, TP8: aiter-bpreshuffle re-laid out the weight that ... reads directly' - the
    diagnosis, said once; what restores it is in `action_lines`."""
    culprit = group.culprit
    return f"{culprit.layer} at {where_and_what(group.configs)[0]}: {causes(culprit.violations)}"


@dataclass(frozen=True)
class ActionLine:
    """One thing a reader can do about a culprit group: `label` ("workaround now", "code fix", "known
    fix"), the `action` (a setting to paste, a change, an upstream change), `outcome` (what running it
    did: "restores decode", "does NOT restore decode") and `note` ("verified": bisection ran it)."""

    label: str
    action: str
    outcome: str
    note: str
    setting: str | None = None  # what to paste (an environment variable), when there is one
    alternatives: tuple[str, ...] = ()  # further minimal remedies of the same kind

    @property
    def text(self) -> str:
        return f"{self.label}: {self.action} {self.outcome} ({self.note})"


def action_lines(group) -> list[ActionLine]:
    """Workaround first (what can be done tonight), then the code fix, then the known upstream fix."""
    culprit = group.culprit
    what = where_and_what(group.configs)[1]
    lines = []
    if culprit.workarounds:
        best, *others = culprit.workarounds
        lines.append(
            ActionLine(
                "workaround now",
                best.setting or best.description,
                f"restores {what}",
                f"{_what_it_changes(best)}; verified" if best.setting else "verified",
                best.setting,
                tuple(r.setting or r.description for r in others),
            )
        )
    if culprit.code_fixes:
        best, *others = culprit.code_fixes
        lines.append(
            ActionLine(
                "code fix",
                best.description,
                f"restores {what}",
                "verified",
                alternatives=tuple(r.description for r in others),
            )
        )
    if culprit.known_fix is not None:
        fix = culprit.known_fix
        lines.append(
            ActionLine(
                "known fix",
                f"{fix.upstream} (scenario {fix.scenario})",
                f"restores {what}" if fix.restores else f"does NOT restore {what}",
                "verified",
            )
        )
    return lines


def _what_it_changes(remedy) -> str:
    """'disables AiterPreshuffledFp8BlockScaledMMKernel (every kernel modelling it)', 'sets VLLM_ROCM_USE_AITER', or both joined: what a workaround touches."""
    # A vLLM class name disables every kernel modelling it (all backends of AiterFp8BlockScaledMMKernel),
    # so the class is named, not the one kernel registered under it.
    disabled = [
        f"{c.setting} (every kernel modelling it)" if c.setting else c.target
        for c in remedy.changes
        if c.kind == DISABLE_KERNEL
    ]
    settings = [c.target for c in remedy.changes if c.kind == SET_SETTING]
    parts = ([f"disables {', '.join(disabled)}"] if disabled else []) + (
        [f"sets {', '.join(settings)}"] if settings else []
    )
    return " and ".join(parts)


def bisection_line(stats) -> str:
    """'bisection: 85 trials (83 run, 2 reused; 49 sets skipped as provably irrelevant) in 9.7 s'."""
    return (
        f"bisection: {stats.trials} trials ({stats.runs} run, {stats.reused} reused; {stats.skipped} sets "
        f"skipped as provably irrelevant) in {stats.elapsed_s:.1f} s"
    )
