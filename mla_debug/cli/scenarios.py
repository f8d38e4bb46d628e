"""`mla-debug scenarios`: the named scenarios (the built-in seed scenarios, each a vLLM pull request, and
the engine profiles shipped under data/engines/, each a release), and `scenarios show NAME --platform P
[--set NAME=VALUE ...]`: what a scenario resolves to on a platform - the settings in effect, the rules
that applied with their sources, the kernel priority and the model behaviour."""

from __future__ import annotations

import argparse
from dataclasses import fields

from .args import add_platform, add_settings
from .common import add_actions, add_command
from .table import print_columns


def add_parser(sub) -> None:
    scenarios = add_command(
        sub,
        "scenarios",
        None,
        "list the named scenarios and engine profiles; show what one resolves to on a platform",
        "The named scenarios: built-in seed scenarios (each models one vLLM pull request, not a release) and "
        "engine profiles (each models a release of vLLM or SGLang, read from data/engines/). `scenarios show "
        "NAME --platform P` prints what a scenario resolves to on P: the settings in effect, the rules that "
        "applied (what each says and where the engine's code does it), the kernel priority and the model "
        "behaviour.",
    )
    actions = add_actions(scenarios, default=_cmd_list)
    add_command(
        actions, "list", _cmd_list, "the named scenarios (the default)", "Every named scenario and what it models."
    )
    show = add_command(
        actions,
        "show",
        _cmd_show,
        "what a scenario resolves to on a platform",
        "What a scenario (a name or a .yml/.yaml/.json file) resolves to on a platform: the settings in effect, "
        "the rules that applied with their sources, the kernel priority, disabled kernels, kernel options, "
        "per-layer overrides and the model behaviour fields that differ from their defaults.",
    )
    show.add_argument("scenario", metavar="NAME_OR_FILE", help="a named scenario or a scenario file")
    add_platform(show)
    add_settings(show)


def _cmd_list(args: argparse.Namespace) -> int:
    from ..scenarios import SCENARIOS, data_folder, profile_names, scenario

    rows = []
    for name, scen in SCENARIOS.items():
        rows.append((name, "seed scenario", scen.upstream or scen.description))
    for name in profile_names():
        try:
            scen = scenario(name)
        except (ValueError, OSError) as err:
            rows.append((name, "engine profile", f"cannot be read: {err}"))
            continue
        engine = f"{scen.engine}: " if scen.engine else ""
        rows.append((name, "engine profile", f"{engine}{scen.description}"))
    print_columns(("scenario", "kind", "models"), rows)
    try:
        where = f"engine profiles are read from {data_folder() / 'engines'}"
    except FileNotFoundError as err:
        where = f"no engine profiles: {err}"
    print(f"\n{where}; `mla-debug scenarios show NAME --platform P` shows what one resolves to")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from ..kernels import platform
    from ..scenarios import ModelBehaviour
    from ..viz.profile import profile_heading, rule_lines, setting_lines
    from .args import parse_settings, scenario_with_settings

    plat = platform(args.platform)
    scen = scenario_with_settings(args.scenario, parse_settings(args.settings))
    resolved = scen.resolve(plat)
    print(f"{resolved.name}: {resolved.description}" if resolved.description else resolved.name)
    if resolved.resolution is not None:
        print(profile_heading(resolved.resolution))
        lines = setting_lines(resolved.resolution)
        print("settings in effect:" if lines else "settings in effect: none declared")
        for line, setting in zip(lines, resolved.settings.values()):
            print(f"  {line}: {setting.says}")
        rules = rule_lines(resolved.resolution)
        print("rules applied, in order:" if rules else "rules applied: none holds here")
        for line in rules:
            print(f"  {line}")
    else:
        print(f"on {plat.name}: no engine, settings or rules; the scenario is used as it is")
    priority = ", ".join(resolved.priority) if resolved.priority is not None else _default_order(resolved, plat)
    print(f"kernel priority: {priority}")
    print(f"disabled kernels: {', '.join(resolved.disabled) or 'none'}")
    options = "; ".join(f"{kernel} {options}" for kernel, options in resolved.kernel_options.items())
    print(f"kernel options: {options or 'none'}")
    overrides = ", ".join(f"{layer} -> {kernel}" for layer, kernel in resolved.overrides.items())
    print(f"per-layer overrides: {overrides or 'none'}")
    default = ModelBehaviour()
    changed = [
        f"{f.name}={getattr(resolved.behaviour, f.name)}"
        for f in fields(ModelBehaviour)
        if getattr(resolved.behaviour, f.name) != getattr(default, f.name)
    ]
    print(f"model behaviour (fields not at their default): {', '.join(changed) or 'none'}")
    return 0


def _default_order(scen, plat) -> str:
    """The platform's default order the scenario's policy uses when it gives no explicit priority."""
    from ..kernels import TunedTable

    policy = scen.policy(plat, tuned=TunedTable.embedded())
    return f"{', '.join(policy.priority)} (the platform's default order)"
