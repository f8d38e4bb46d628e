"""`mla-debug` command line (also `python -m mla_debug.cli`).

Subcommands:
  demo         the main job on built-in defaults: TP triage of DeepSeek-V3 on an MI355X (make demo)
  triage       run a layer at several TP sizes under serving scenarios; where and why it diverges, and the fix
  layouts      byte forensics of saved tensors against a reference
  kernel-demo  the silent layout bugs of aiter's preshuffled GEMM, one GEMM at a time
  kernels      the registered kernels, their capability flags and whether they run here
  select       which kernel a serving engine picks for a layer shape on a platform, and why
  checkpoint   `checkpoint make`: write a seeded synthetic one-layer checkpoint (Hugging Face folder)
  profile      profile one layer run: per-step time, ops and kernels, and the trace folder
  traces       `traces compare A B`: per-step and per-kernel time of two traces, kernels added or removed
  tensorboard  browse trace folders in TensorBoard on 127.0.0.1 (needs the `profile` extra)
"""

from __future__ import annotations

import argparse
import sys

from . import cli_layouts, cli_profile, cli_triage
from .cli_common import version


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run(args)


def _cmd_kernel_demo(args: argparse.Namespace) -> int:
    from .kernel_demo import run

    return run(args)


def _cmd_kernels(args: argparse.Namespace) -> int:
    from . import get_kernel, kernel_names

    rows = []
    for name in kernel_names():
        kernel = get_kernel(name)
        ok, why = kernel.availability()
        rows.append(
            (
                name,
                "yes" if kernel.wants_transposed_act_scale else "no",
                "yes" if kernel.preshuffles_weight else "no",
                "yes" if ok else "no",
                # A stand-in says how it runs here (Triton, or the emulation's code without a GPU).
                why if not ok else kernel.description + (f" [{why}]" if kernel.stands_in_for else ""),
            )
        )
    header = ("kernel", "col-major scale", "preshuffles", "runs here", "description / why not")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  " + header[4])
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + row[4])
    return 0


def _cmd_select(args: argparse.Namespace) -> int:
    from . import KernelPolicy, TunedTable, platform

    shapes = [_parse_shape(shape) for shape in args.shape]  # all of them before any output
    if args.m is not None and args.m < 1:
        raise ValueError(f"--m {args.m}: M (tokens in the call) must be >= 1")
    plat = platform(args.platform)
    tuned = TunedTable.from_csv(args.tuned) if args.tuned else TunedTable.default()
    policy = KernelPolicy.for_platform(
        plat,
        preshuffled_first=not args.before_pr51692,
        native=False if args.emulated else None,
        tuned=tuned,
        disabled=args.disable or [],
    )
    print(f"platform {plat.name} ({plat.description}); priority {policy.priority}; tuned table: {tuned.source}")
    for n, k in shapes:
        kernel, reason = policy.select(args.layer, n, k, plat, m=args.m)
        print(f"{args.layer} N={n} K={k}: {reason}")
        if args.m is not None and tuned.has_m:
            row = tuned.lookup(plat, args.m, n, k)
            inside = (
                f"row M={row.m} {row.libtype} {row.kernel_name} ({row.source})" if row else "no row: default CK kernel"
            )
            print(f"  inside aiter for M={args.m}: {inside}")
    if args.m is not None and not tuned.has_m:
        # Without this, --m would silently add nothing: the embedded table knows shapes, not per-M rows.
        print(
            f"--m {args.m}: the tuned table ({tuned.source}) has no per-M rows, so it cannot say which row aiter "
            f"uses for M={args.m}; pass --tuned with aiter's tuned CSV file(s) or configs/ folder to see it"
        )
    return 0


def _parse_shape(text: str) -> tuple[int, int]:
    try:
        n, k = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"shape {text!r} is not NxK (e.g. 3072x1536)") from None
    if n < 1 or k < 1:
        raise ValueError(f"shape {text!r}: N and K must be >= 1")
    return n, k


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    from .model import Checkpoint, MLAConfig
    from .model.checkpoint import check_new_folder

    # A DeepSeek-V3 layer takes seconds to build: a taken --out or a bad preset fails before that.
    MLAConfig.preset(args.preset)
    check_new_folder(args.out, f"--out {args.out}")
    ckpt = Checkpoint.synthetic(args.preset, seed=args.seed, quantize=not args.no_quantize, layer=args.layer)
    path = ckpt.save(args.out)
    files = sorted(p for p in path.iterdir() if p.is_file())
    kind = f"fp8 {ckpt.fmt.name}, 128x128 block scales" if ckpt.fmt else "bf16"
    print(f"wrote {path}: {ckpt.cfg.name} layer {ckpt.layer}, seed {args.seed}, {kind}")
    print(f"  {len(ckpt.tensors)} tensors, {ckpt.num_params:,} parameters, {ckpt.nbytes:,} bytes of tensors")
    for file in files:
        print(f"  {file.name}  {file.stat().st_size:,} bytes")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .demo import DESCRIPTION as DEMO_DESCRIPTION
    from .demo import add_arguments as add_demo_arguments
    from .kernel_demo import DESCRIPTION as KERNEL_DEMO_DESCRIPTION
    from .model import PRESETS

    parser = argparse.ArgumentParser(prog="mla-debug", description="Debug FP8 block-scaled MLA layers across TP sizes.")
    parser.add_argument("--version", action="version", version=f"mla-debug {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="the main job on defaults: TP triage of DeepSeek-V3 on MI355X (see make demo)",
        description=DEMO_DESCRIPTION,
    )
    add_demo_arguments(demo)
    demo.set_defaults(func=_cmd_demo)

    kernel_demo = sub.add_parser(
        "kernel-demo", help="the silent layout bugs, one GEMM at a time", description=KERNEL_DEMO_DESCRIPTION
    )
    kernel_demo.set_defaults(func=_cmd_kernel_demo)

    kernels = sub.add_parser(
        "kernels",
        help="list kernels, their flags and availability",
        description="Every registered kernel: whether it wants column-major activation scales, whether it "
        "preshuffles its weight at load, whether it runs on this machine (and why not), and what it emulates.",
    )
    kernels.set_defaults(func=_cmd_kernels)

    select = sub.add_parser(
        "select",
        help="which kernel a layer shape gets, and why",
        description="Which kernel a serving engine's policy picks for per-rank weight shapes on a platform, and "
        "why; with --m and aiter's tuned CSVs, which tuned row aiter itself would use for that M.",
    )
    select.add_argument("shape", nargs="+", help="per-rank weight shape NxK, e.g. 3072x1536")
    select.add_argument("--platform", default="mi355x", metavar="NAME", help="platform preset (default: mi355x)")
    select.add_argument("--layer", default="linear", help="layer name used in the explanation")
    select.add_argument(
        "--m", type=int, default=None, help="also show aiter's tuned row for this M (needs per-M rows: --tuned CSV)"
    )
    select.add_argument("--tuned", default=None, help="tuned CSV file(s) or aiter configs/ folder (':'-separated)")
    select.add_argument("--before-pr51692", action="store_true", help="vLLM's ROCm order before the preshuffled kernel")
    select.add_argument("--disable", nargs="*", help="kernel names or vLLM class names to disable")
    select.add_argument("--emulated", action="store_true", help="never use the real aiter even when importable")
    select.set_defaults(func=_cmd_select)

    checkpoint = sub.add_parser(
        "checkpoint",
        help="make synthetic one-layer checkpoints",
        description="Synthetic checkpoints: `checkpoint make` writes one seeded attention layer as a Hugging "
        "Face folder (config.json, model.safetensors and its index) that `triage --checkpoint` and `layouts` read.",
    )
    checkpoint_sub = checkpoint.add_subparsers(dest="action", required=True, metavar="ACTION")
    make = checkpoint_sub.add_parser(
        "make",
        help="write a seeded synthetic layer as a Hugging Face folder",
        description="Write a seeded synthetic attention layer (DeepSeek-like weight statistics, fp8 with "
        "128x128 block scales unless --no-quantize) as a new Hugging Face folder.",
    )
    make.add_argument("--preset", required=True, help=f"model preset: {', '.join(PRESETS)}")
    make.add_argument("--out", required=True, help="new (or empty) folder to write; never overwritten")
    make.add_argument("--seed", type=int, default=0, help="seed of the weights; same seed, same bytes (default: 0)")
    make.add_argument("--layer", type=int, default=0, help="layer index used in the tensor names (default: 0)")
    make.add_argument("--no-quantize", action="store_true", help="keep bf16 weights (no fp8, no scales)")
    make.set_defaults(func=_cmd_checkpoint)

    cli_layouts.add_parser(sub)
    cli_triage.add_parser(sub)
    cli_profile.add_parser(sub)
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
