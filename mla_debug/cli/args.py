"""The options several subcommands share, defined once so that `--model`, `--platform`, `--scenario`,
`--set`, `--tp`, `--tokens`, `--seed`, `--device`, `--checkpoint` (with `--layer`, `--ignore-extra`,
`--quantize`), `--start-position` mean and say the same thing everywhere.

Each function adds one option to a parser; a subcommand passes only what differs (its default, whether
it takes one value or several). The lists of valid names come from the registries at parser-build time,
so a new preset, platform or scenario shows up in every help text at once.
"""

from __future__ import annotations

import argparse

MODES = ("prefill", "decode")


def add_model(parser: argparse.ArgumentParser, default: str, note: str = "") -> None:
    from ..model import PRESETS

    parser.add_argument(
        "--model",
        default=default,
        metavar="PRESET",
        help=f"model preset: {', '.join(PRESETS)} (default: {default}{note})",
    )


def add_platform(parser: argparse.ArgumentParser, default: str = "mi355x") -> None:
    from ..kernels import platform_names

    parser.add_argument(
        "--platform",
        default=default,
        metavar="NAME",
        help=f"platform whose kernels and fp8 format are emulated: {', '.join(platform_names())} (default: {default})",
    )


def add_scenario(parser: argparse.ArgumentParser, default: str = "vllm-pr51692", several: bool = False) -> None:
    """`--scenario` (one or several) and `--set`, which sets the declared settings of engine profiles."""
    from ..scenarios import profile_names, scenario_names

    what = "named scenarios" if several else "a named scenario"
    shared = "; several share one set of reference runs" if several else ""
    profiles = profile_names()
    releases = f"; engine profiles of releases: {', '.join(profiles)}" if profiles else ""
    parser.add_argument(
        "--scenario",
        nargs="+" if several else None,
        default=[default] if several else default,
        metavar="NAME_OR_FILE",
        help=f"{what} (built-in seed scenarios, each a vLLM pull request: {', '.join(scenario_names())}{releases}) "
        f"or .yml/.yaml/.json scenario file{'s' if several else ''}{shared} (default: {default}); "
        "`mla-debug scenarios` lists them",
    )
    add_settings(parser)


def add_settings(parser: argparse.ArgumentParser) -> None:
    """`--set NAME=VALUE` (repeatable): a setting an engine profile declares (`parse_settings` reads them)."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        dest="settings",
        help="set a setting an engine profile declares (an environment variable, server argument or fact, e.g. "
        "VLLM_ROCM_USE_AITER=1); repeatable; `mla-debug scenarios show NAME` lists a profile's settings",
    )


def parse_settings(items: list[str]) -> dict[str, str]:
    """``--set`` values as {name: value}; ValueError naming a malformed or repeated one."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"--set {item}: expected NAME=VALUE, e.g. --set VLLM_ROCM_USE_AITER=1")
        if name.strip() in out:
            raise ValueError(f"--set {item}: {name.strip()} is set twice")
        out[name.strip()] = value.strip()
    return out


def scenario_with_settings(spec: str, settings: dict[str, str]):
    """The scenario `spec` names (`scenarios.scenario`) with `settings` set (none: the scenario as is)."""
    from ..scenarios import scenario

    scen = scenario(spec)
    return scen.with_settings(settings) if settings else scen


def add_tp(parser: argparse.ArgumentParser, default: int | list[int]) -> None:
    if isinstance(default, list):
        shown = " ".join(map(str, default))
        parser.add_argument(
            "--tp", nargs="+", type=int, default=default, metavar="N", help=f"TP sizes (default: {shown})"
        )
    else:
        parser.add_argument("--tp", type=int, default=default, metavar="N", help=f"TP size (default: {default})")


def add_tokens(parser: argparse.ArgumentParser, default: int = 16) -> None:
    parser.add_argument(
        "--tokens",
        type=int,
        default=default,
        metavar="N",
        help=f"tokens in the layer's input, >= 1 (default: {default})",
    )


def add_seed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights and inputs (default: 0)")


def add_device(parser: argparse.ArgumentParser, default: str | None) -> None:
    why = "the GPU for an NVIDIA platform when one is visible, else the CPU" if default is None else default
    parser.add_argument("--device", choices=["cpu", "cuda"], default=default, help=f"where to compute (default: {why})")


def add_start_position(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--start-position",
        type=int,
        default=0,
        metavar="N",
        help="position of the first token; the tokens sit at N, N+1, ... (default: 0). DeepSeek's yarn RoPE "
        "changes regime past original_max_position_embeddings (4096); must stay below max_position_embeddings",
    )


def add_output_file(parser: argparse.ArgumentParser, option: str, suffix: str, what: str, noun: str) -> None:
    """An option naming a `suffix` file to write `what` to; the writers never overwrite (`common.written`)."""
    parser.add_argument(
        option,
        default=None,
        metavar=f"FILE{suffix}",
        help=f"write {what} here (an existing file is kept: the {noun} goes to FILE-2{suffix})",
    )


def add_ignore_extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ignore-extra",
        action="store_true",
        help="skip attention tensors this toolkit does not know (biases, unknown modules) instead of refusing "
        "the checkpoint; the skipped ones are named (DeepSeek-V3.2's indexer is recognised without it)",
    )


def add_checkpoint(parser: argparse.ArgumentParser) -> None:
    """`--checkpoint`, `--layer`, `--ignore-extra` and `--quantize` (the recipe for a dense checkpoint)."""
    from ..model.weight_recipe import DEFAULT_RECIPE, recipe_names

    parser.add_argument(
        "--checkpoint", default=None, metavar="DIR", help="checkpoint folder (safetensors, Hugging Face layout)"
    )
    parser.add_argument(
        "--layer", type=int, default=0, metavar="N", help="layer index inside --checkpoint (default: 0)"
    )
    add_ignore_extra(parser)
    parser.add_argument(
        "--quantize",
        default=None,
        metavar="RECIPE",
        help="block-quantize a dense (bf16) --checkpoint first, as a serving engine sees an FP8 checkpoint: "
        f"{', '.join(recipe_names())} ({DEFAULT_RECIPE}: DeepSeek's released-checkpoint recipe, e4m3fn, 128x128 "
        "blocks, scale amax/448). A dense checkpoint is refused without it: dense linears cannot show an FP8 bug",
    )
