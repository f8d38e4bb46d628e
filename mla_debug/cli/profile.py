"""`mla-debug profile`, `mla-debug traces compare` and `mla-debug tensorboard`: kernel traces from the
terminal - record one layer run, diff two recorded runs, browse them in TensorBoard."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

INSTALL_HINT = "pip install 'mla-debug[profile]' (tensorboard and torch-tb-profiler)"


def add_parser(sub) -> None:
    """Register `profile`, `traces` and `tensorboard` on the `mla-debug` subparsers."""
    from .args import MODES, add_device, add_model, add_platform, add_scenario, add_seed, add_tokens, add_tp
    from .common import add_actions, add_command

    profile = add_command(
        sub,
        "profile",
        run_profile,
        "profile one layer run on a synthetic checkpoint: per-step time and the trace folder",
        "Run one attention layer under torch.profiler (after warm-up runs) and write its trace to a fresh folder; "
        "print the time, ops and kernels of every step.",
    )

    add_model(profile, "tiny")
    add_platform(profile)
    add_scenario(profile)
    add_tp(profile, 1)
    profile.add_argument("--mode", default="prefill", choices=MODES, help="default: prefill")
    add_tokens(profile)
    add_seed(profile)
    profile.add_argument(
        "--executor",
        default="simulated",
        choices=["simulated", "distributed"],
        help="simulated: every rank in this process; distributed: one process per rank (torch.distributed)",
    )
    add_device(profile, "cpu")
    profile.add_argument("--warmup", type=int, default=1, help="unprofiled runs first, so one-time work is left out")
    profile.add_argument(
        "--out", default="profiles", metavar="DIR", help="parent folder of the run's fresh trace folder"
    )

    traces = add_command(
        sub,
        "traces",
        None,
        "work with recorded traces (`traces compare A B`)",
        "Recorded traces: `traces compare A B` prints per-step and per-kernel time of B against A and the kernels "
        "added or removed.",
    )
    compare = add_command(
        add_actions(traces),
        "compare",
        run_compare,
        "per-step and per-kernel time of trace B against trace A; kernels added or removed",
        "A and B are trace folders (as `mla-debug profile` writes them) or .pt.trace.json(.gz) files.",
    )
    compare.add_argument("a", help="the baseline trace (folder or file)")
    compare.add_argument("b", help="the trace compared with it")
    compare.add_argument("--top", type=int, default=15, help="kernels shown, largest |delta| first")
    compare.add_argument(
        "--full-names", action="store_true", help="print whole demangled kernel names (default: one short line)"
    )

    tensorboard = add_command(
        sub,
        "tensorboard",
        run_tensorboard,
        "browse trace folders in TensorBoard (local only; needs the `profile` extra)",
        "Start TensorBoard on 127.0.0.1 with DIR as its log dir; Ctrl-C stops it.",
    )
    tensorboard.add_argument("dir", nargs="?", default="profiles", help="folder holding trace folders")
    tensorboard.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")


def _number(value: Any) -> float | None:
    """A table value as a finite float, None for a missing, NaN or non-numeric one."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _us(value: Any) -> str:
    number = _number(value)
    return "-" if number is None else f"{number:,.1f}"


def _count(value: Any) -> str:
    number = _number(value)
    return "-" if number is None else f"{int(number):,}"


def _ratio(value: Any) -> str:
    number = _number(value)
    return "-" if number is None else f"{number:.2f}x"


def _delta(value: Any) -> str:
    number = _number(value)
    if number is None:
        return "-"
    colour = "red" if number > 0 else "green" if number < 0 else None
    return f"[{colour}]{number:+,.1f}[/]" if colour else f"{number:+,.1f}"


def _cell(value: Any) -> str:
    # Names are data: escaped, so a '[...]' in an op or kernel name is printed, not taken as rich markup.
    return "-" if value is None or value != value else escape(str(value))  # NaN is not equal to itself


def step_table(trace, title: str) -> Table:
    """A rich table of `trace.per_step()`: step, kernel, wall and GPU time, launches and share."""
    frame = trace.per_step()
    gpu = bool(trace.has_gpu)
    table = Table(title=title)
    columns = ["step", "kernel", "wall us"] + (["GPU us"] if gpu else []) + ["CPU ops"]
    columns += (["GPU kernels"] if gpu else []) + ["share"]
    for name in columns:
        # Step and kernel names fold in a narrow terminal or an 80-column log rather than end in "...".
        named = name in ("step", "kernel")
        table.add_column(name, justify="left" if named else "right", overflow="fold" if named else "ellipsis")
    for row in frame.itertuples(index=False):
        cells = [_cell(row.step), _cell(row.kernel), _us(row.wall_us)]
        cells += [_us(row.gpu_us)] if gpu else []
        cells += [_count(row.cpu_ops)]
        cells += [_count(row.gpu_kernels)] if gpu else []
        share = _number(row.share)
        cells.append("-" if share is None else f"{share:.1%}")
        table.add_row(*cells)
    return table


def run_profile(args: argparse.Namespace) -> int:
    import torch

    from ..kernels import platform as platform_of
    from ..model import Checkpoint
    from ..model.preflight import check_layer_options
    from ..parallel import check_device, run_layer
    from ..profiling import profile
    from .args import parse_settings, scenario_with_settings
    from .common import check_output_folder

    # Everything checked before the checkpoint is built, naming the rule broken.
    if args.warmup < 0:
        raise ValueError(f"warmup={args.warmup} must be >= 0")
    cfg = check_layer_options(args.model, tp_sizes=[args.tp], tokens=args.tokens)
    platform_of(args.platform)
    scen = scenario_with_settings(args.scenario, parse_settings(args.settings))
    check_device(args.device)
    check_output_folder(args.out, "--out")
    console = Console()
    ckpt = Checkpoint.synthetic(cfg, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    hidden = torch.randn(args.tokens, cfg.hidden_size, generator=gen).to(torch.bfloat16)
    positions = torch.arange(args.tokens)
    options = dict(
        tp_size=args.tp,
        mode=args.mode,
        platform=args.platform,
        scenario=scen,
        executor=args.executor,
        device=args.device,
    )
    for _ in range(args.warmup):
        run_layer(cfg, ckpt, hidden, positions, **options)
    metadata = dict(
        model=cfg.name,
        platform=args.platform,
        scenario=scen.name,
        tp=args.tp,
        mode=args.mode,
        tokens=args.tokens,
        seed=args.seed,
        executor=args.executor,
        command="mla-debug profile",
    )
    _, session = profile(run_layer, cfg, ckpt, hidden, positions, out_dir=args.out, metadata=metadata, **options)
    trace = session.trace()
    title = f"{cfg.name} TP{args.tp} {args.mode} on {args.platform} under {scen.name} ({args.tokens} tokens, {args.executor})"
    console.print(step_table(trace, escape(title)))
    for warning in trace.warnings:
        console.print(f"warning: {warning}", style="yellow", markup=False)
    # Paths and commands stay on one line (rich would fold them at the terminal width) and are printed as
    # they are (a '[' in a path is no markup).
    plain = dict(soft_wrap=True, markup=False, highlight=False)
    console.print(f"trace folder: {session.folder}", **plain)
    for path in session.trace_paths:
        console.print(f"  {Path(path).name}", **plain)
    console.print(f"compare with another run: mla-debug traces compare {session.folder} OTHER", **plain)
    console.print(
        f"browse: mla-debug tensorboard {args.out}  (or open a .pt.trace.json.gz in https://ui.perfetto.dev)", **plain
    )
    return 0


def _change(a: Any, b: Any) -> str:
    """'x' when both sides are x, else 'a -> b' ('-' for a side that lacks it)."""
    a, b = _cell(a), _cell(b)
    return a if a == b else f"{a} -> {b}"


def run_compare(args: argparse.Namespace) -> int:
    from ..profiling import compare_traces, load_trace
    from ..profiling.diff import WORKLOAD_FIELDS
    from ..viz.timeline import short_name
    from ..viz.trace_tables import time_change

    if args.top < 1:
        raise ValueError(f"top={args.top} must be >= 1")
    console = Console()
    plain = dict(soft_wrap=True, markup=False, highlight=False)

    def kernel_name(value: Any) -> Any:
        return value if args.full_names or not isinstance(value, str) else short_name(value)

    a, b = load_trace(args.a), load_trace(args.b)
    diff = compare_traces(a, b)
    console.print(f"A: {args.a} ({diff.a_label})\nB: {args.b} ({diff.b_label})", **plain)
    if diff.differences and not any(key in WORKLOAD_FIELDS for key in diff.differences):
        # What was varied on purpose (the scenario): said once, not as a warning.
        listed = "; ".join(f"{key} (A: {x}, B: {y})" for key, (x, y) in diff.differences.items())
        console.print(f"the runs differ in {listed}", **plain)
    for warning in diff.warnings:
        console.print(f"warning: {warning}", style="yellow", **plain)
    if diff.scope == "steps":
        _print_step_diff(console, diff)

    kernels = diff.per_kernel
    what = "GPU kernels" if diff.level == "gpu" else "CPU ops"
    whole = diff.scope == "trace"
    # A kernel present on one side only has no delta; its own time is the change.
    change = time_change(kernels).abs()
    shown = kernels.loc[change.sort_values(ascending=False, kind="stable").index].head(args.top)
    where = ", whole trace" if whole else " by step"
    table = Table(title=f"{what}{where}: the {len(shown)} largest changes of {len(kernels)} (us)")
    if not whole:
        table.add_column("step", overflow="fold")
    table.add_column("name" if whole else "name (A -> B when they differ)", overflow="fold")
    for name in ("A us", "B us", "delta us", "B/A", "count A -> B"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in shown.itertuples(index=False):
        cells = [] if whole else [_cell(row.step)]
        cells += [
            _change(kernel_name(row.a_name), kernel_name(row.b_name)),
            _us(row.a_us),
            _us(row.b_us),
            _delta(row.delta_us),
            _ratio(row.ratio),
            f"{_count(row.a_count)} -> {_count(row.b_count)}",
        ]
        table.add_row(*cells)
    console.print(table)
    if whole and diff.level == "gpu":  # kernels do not nest, so their times add up (CPU ops' do not)
        a_total, b_total = kernels["a_us"].sum(), kernels["b_us"].sum()
        console.print(
            f"total {what} time: A {_us(a_total)} us in {_count(kernels['a_count'].sum())}, "
            f"B {_us(b_total)} us in {_count(kernels['b_count'].sum())} (B/A {_ratio(b_total / a_total if a_total else None)})",
            **plain,
        )
    for label, names in (("added in B", diff.added), ("removed in B", diff.removed)):
        console.print(f"[bold]{label}[/] ({len(names)}){':' if names else ': none'}", soft_wrap=True)
        for found in names:
            console.print(f"  {kernel_name(found)}", **plain)
    return 0


def _print_step_diff(console: Console, diff) -> None:
    per_step = diff.per_step
    # Launch counts are GPU kernels (or the CPU's launch calls): all zero on CPU-only traces, where the
    # columns would only say nothing ran on a GPU.
    launches = bool((per_step["a_launches"] != 0).any() or (per_step["b_launches"] != 0).any())
    gpu = bool(per_step["a_gpu_us"].notna().any() and per_step["b_gpu_us"].notna().any())
    kernels_differ = bool((per_step["a_kernel"].fillna("") != per_step["b_kernel"].fillna("")).any())
    title = "per step: B against A (us of CPU wall time" + ("; GPU: busy time" if gpu else "") + "; + is slower in B)"
    steps = Table(title=title)
    steps.add_column("step", overflow="fold")
    names = ("A us", "B us", "delta us", "B/A") + (("A GPU us", "B GPU us") if gpu else ())
    for name in names + (("launches A -> B",) if launches else ()):
        steps.add_column(name, justify="right", no_wrap=True)
    if kernels_differ:
        steps.add_column("kernel A -> B", overflow="fold")
    for row in per_step.itertuples(index=False):
        cells = [_cell(row.step), _us(row.a_us), _us(row.b_us), _delta(row.delta_us), _ratio(row.ratio)]
        if gpu:
            cells += [_us(row.a_gpu_us), _us(row.b_gpu_us)]
        if launches:
            cells.append(f"{_count(row.a_launches)} -> {_count(row.b_launches)}")
        if kernels_differ:
            cells.append(_change(row.a_kernel, row.b_kernel))
        steps.add_row(*cells)
    console.print(steps)
    if not launches:
        console.print("no GPU kernels or launch calls in either trace (CPU-only runs): launches not shown")


def find_tensorboard() -> str | None:
    """The `tensorboard` program: beside this Python first (the venv that has torch-tb-profiler), then
    on PATH; None when neither has it."""
    here = Path(sys.executable).parent
    return shutil.which("tensorboard", path=os.pathsep.join([str(here), os.environ.get("PATH", "")]))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def run_tensorboard(args: argparse.Namespace) -> int:
    logdir = Path(args.dir)
    if not logdir.is_dir():
        raise FileNotFoundError(f"{logdir} is not a folder; profile a run first (mla-debug profile --out {logdir})")
    program = find_tensorboard()
    if program is None:
        # FileNotFoundError: cli.main prints it as `mla-debug tensorboard: error: ...` and exits 2.
        raise FileNotFoundError(f"tensorboard is not installed; {INSTALL_HINT}")
    if importlib.util.find_spec("torch_tb_profiler") is None:
        print(
            f"mla-debug tensorboard: warning: torch-tb-profiler is not installed here, so TensorBoard may lack "
            f"its PyTorch Profiler tab; {INSTALL_HINT}",
            file=sys.stderr,
        )
    host = "127.0.0.1"  # never on all interfaces: traces name the machine, its paths and its processes
    port = args.port or free_port(host)
    command = [program, "--logdir", str(logdir), "--host", host, "--port", str(port)]

    # SIGTERM (a closed terminal, a job runner) must stop TensorBoard too, not leave it orphaned: turn it
    # into the same path as Ctrl-C. Handlers can only be set from the main thread (an embedding app may
    # call main() elsewhere).
    def on_term(signum, frame):
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if main_thread else None
    child = None
    try:
        child = subprocess.Popen(command)
        print(
            f"TensorBoard for {logdir.resolve()}: http://{host}:{port}/#pytorch_profiler  (Ctrl-C stops it)", flush=True
        )
        code = child.wait()
        print(f"TensorBoard exited with code {code}", file=sys.stderr)
    except KeyboardInterrupt:
        code = 0
        print("stopping TensorBoard", flush=True)
    finally:
        # Whatever ended the wait (Ctrl-C, SIGTERM, an error), TensorBoard does not outlive this command.
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return code
