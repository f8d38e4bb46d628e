"""`mla-debug kernels` (the registered kernels, their flags and whether they run here; the norm+quant
backends and on which devices they run) and `mla-debug select` (which kernel a serving engine's policy
picks for a layer shape on a platform, and why). Both lists come from the implementation registries,
so a newly registered kernel or backend shows up without being named here."""

from __future__ import annotations

import argparse

from .args import add_platform
from .common import add_command
from .table import print_columns


def add_parser(sub) -> None:
    add_command(
        sub,
        "kernels",
        _cmd_kernels,
        "list kernels and norm+quant backends, their flags and availability",
        "Every registered kernel: whether it wants column-major activation scales, whether it preshuffles its "
        "weight at load, whether it runs on this machine (and why not), and what it emulates. Then every "
        "norm+quant backend (the fused RMSNorm + FP8 group quant): whether it runs on CPU tensors (and CUDA "
        "tensors where a GPU is visible), and which one 'auto' picks for each.",
    )
    select = add_command(
        sub,
        "select",
        _cmd_select,
        "which kernel a layer shape gets, and why",
        "Which kernel a serving engine's policy picks for per-rank weight shapes on a platform, and why; with --m "
        "and aiter's tuned CSVs, which tuned row aiter itself would use for that M.",
    )
    select.add_argument("shape", nargs="+", help="per-rank weight shape NxK, e.g. 3072x1536")
    add_platform(select)
    select.add_argument("--layer", default="linear", help="layer name used in the explanation")
    select.add_argument(
        "--m", type=int, default=None, help="also show aiter's tuned row for this M (needs per-M rows: --tuned CSV)"
    )
    select.add_argument("--tuned", default=None, help="tuned CSV file(s) or aiter configs/ folder (':'-separated)")
    select.add_argument("--before-pr51692", action="store_true", help="vLLM's ROCm order before the preshuffled kernel")
    select.add_argument("--disable", nargs="*", help="kernel names or vLLM class names to disable")
    select.add_argument("--emulated", action="store_true", help="never use the real aiter even when importable")


def _cmd_kernels(args: argparse.Namespace) -> int:
    from ..kernels import get_kernel, kernel_names

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
    print_columns(("kernel", "col-major scale", "preshuffles", "runs here", "description / why not"), rows)
    print()
    _print_norm_quant_backends()
    return 0


def _print_norm_quant_backends() -> None:
    """One row per backend and device: "yes", "by name" (only through an interpreter, never picked by
    "auto") or "no" with the reason; then what "auto" picks on each device."""
    import torch

    from ..normquant import NORM_QUANT_BACKENDS, resolve_backend

    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    rows = []
    for name, backend in NORM_QUANT_BACKENDS.items():
        for device in devices:
            ok, why = backend.availability(device)
            runs = "no" if not ok else "yes" if backend.offered_on(device) else "by name"
            rows.append((name, device.type, runs, backend.description if runs == "yes" else why))
    print_columns(("norm+quant backend", "tensors on", "runs", "description / why not"), rows)
    picks = ", ".join(f"{resolve_backend('auto', device)} for {device.type} tensors" for device in devices)
    print(f"'auto' picks {picks}")


def _cmd_select(args: argparse.Namespace) -> int:
    from ..kernels import KernelPolicy, TunedTable, platform

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
