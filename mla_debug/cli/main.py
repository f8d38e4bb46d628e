"""`mla-debug` command line (also `python -m mla_debug.cli`).

Subcommands:
  demo         the main job on built-in defaults: TP triage of DeepSeek-V3 on an MI355X (make demo)
  triage       run a layer at several TP sizes under serving scenarios; where and why it diverges, and the fix
  scenarios    the named scenarios and engine profiles; `scenarios show NAME --platform P` resolves one
  report       show a saved triage again (summary, culprits) and draw its HTML report from the JSON alone
  layouts      byte forensics of saved tensors against a reference
  kernel-demo  the silent layout bugs of aiter's preshuffled GEMM, one GEMM at a time
  kernels      the registered kernels and norm+quant backends, their flags and whether they run here
  select       which kernel a serving engine picks for a layer shape on a platform, and why
  checkpoint   `checkpoint make`: write a seeded synthetic one-layer checkpoint (Hugging Face folder)
  profile      profile one layer run: per-step time, ops and kernels, and the trace folder
  traces       `traces compare A B`: per-step and per-kernel time of two traces, kernels added or removed
  tensorboard  browse trace folders in TensorBoard on 127.0.0.1 (needs the `profile` extra)
  capture      `capture show DIR`: what a layer capture holds; `capture diff A B`, `capture explain A`: the
               layout diff of two captures and the stories that explain a capture's diverging steps;
               `capture import-sglang`, `capture export --format sglang`: SGLang dumper folders in and out
  scan         `scan run|show|compare`: every decoder layer of one forward, summarized; the first layer
               whose divergence its input does not explain
  incidents    the public record's FP8 incidents; `incidents run NAME` reproduces one, diagnosis beside the thread's
"""

from __future__ import annotations

import argparse
import sys

from .._version import version
from . import (
    capture,
    checkpoint,
    demo,
    incidents,
    kernel_demo,
    kernels,
    layouts,
    profile,
    report,
    scan,
    scenarios,
    triage,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mla-debug", description="Debug FP8 block-scaled MLA layers across TP sizes.")
    parser.add_argument("--version", action="version", version=f"mla-debug {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for command in (
        demo,
        kernel_demo,
        kernels,
        checkpoint,
        layouts,
        triage,
        scenarios,
        report,
        profile,
        capture,
        scan,
        incidents,
    ):
        command.add_parser(sub)
    return parser


def _error_text(err: BaseException) -> str:
    # An OSError raised by the system ("[Errno 13] Permission denied: 'x'") reads better as "x: Permission
    # denied"; the package's own carry a full sentence as their only argument.
    if isinstance(err, OSError) and err.strerror and err.filename:
        return f"{err.filename}: {err.strerror}"
    return str(err)


def main(argv: list[str] | None = None) -> int:
    """Run `mla-debug ARGS`. Every error is one line, `mla-debug <command>: error: <message>`, and exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    try:
        return args.func(args)
    except (ValueError, TypeError, LookupError, OSError) as err:
        print(f"mla-debug {command}: error: {_error_text(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mla-debug {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
