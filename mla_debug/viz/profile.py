"""An engine profile's resolution in words: the engine, the settings in effect and the rules that applied
with their sources - the lines the terminal (`mla-debug triage`, `mla-debug scenarios show`) and the
HTML report share."""

from __future__ import annotations

import html

from ..scenarios import Resolution, SettingKind

_KIND_WORDS = {
    SettingKind.ENV: "environment variable",
    SettingKind.ARG: "server argument",
    SettingKind.FACT: "fact",
    SettingKind.CODE: "source constant",
}


def profile_heading(resolution: Resolution) -> str:
    """'vLLM 0.33.0 on mi355x: 4 of its rules applied; settings VLLM_ROCM_USE_AITER=1 (not the default 0)'."""
    engine = str(resolution.engine) if resolution.engine else "a scenario with settings and rules"
    count = len(resolution.rules)
    applied = f"{count} rule{'s' if count != 1 else ''} applied"
    changed = resolution.changed_settings
    settings = (
        "; settings " + ", ".join(f"{s.text} (not the default {s.default})" for s in changed)
        if changed
        else "; every setting at its default"
    )
    return f"{engine} on {resolution.platform}: {applied}{settings}"


def setting_lines(resolution: Resolution) -> list[str]:
    """One line per declared setting: 'VLLM_ROCM_USE_AITER=1 (environment variable; default 0)'."""
    lines = []
    for s in resolution.settings:
        default = "the default" if s.is_default else f"default {s.default}"
        lines.append(f"{s.text} ({_KIND_WORDS[s.kind]}; {default})")
    return lines


def rule_lines(resolution: Resolution) -> list[str]:
    """One line per applied rule, in order: 'rocm-aiter: <what it says> [vllm 0.33.0 file: function]'."""
    return [f"{r.id}: {r.says}" + (f" [{r.source}]" if r.source else "") for r in resolution.rules]


def profile_html(resolution: Resolution | None) -> str:
    """The report's section on the engine profile ('' for a scenario that is no profile)."""
    if resolution is None:
        return ""
    settings = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in setting_lines(resolution))
    rules = "".join(
        f"<li><b>{html.escape(r.id)}</b>: {html.escape(r.says)}"
        + (f" <small>({html.escape(str(r.source))})</small>" if r.source else "")
        + "</li>"
        for r in resolution.rules
    )
    return (
        f"<h2>Engine profile</h2><p>{html.escape(profile_heading(resolution))}.</p>"
        f"<h3>Settings in effect</h3><ul>{settings or '<li>none declared</li>'}</ul>"
        f"<h3>Rules applied, in order</h3><ol>{rules or '<li>none</li>'}</ol>"
    )
