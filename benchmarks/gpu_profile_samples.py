"""Record the small GPU sample traces committed under profiles/samples/ (run on an NVIDIA GPU).

Run: PYTHONPATH=. python3 benchmarks/gpu_profile_samples.py --out DIR

Cases (real dimensions, synthetic weights, 64 tokens, prefill, TP1, one warm-up forward first so the
trace shows steady-state kernels, not the one-time weight decode):
  dsv3-cublas         DeepSeek-V3 MLA with cuBLAS blockwise FP8 GEMMs (scenario nvidia-cublas)
  v4flash-fused       DeepSeek-V4-Flash attention, q/kv norm + group quant fused (one producer for wq_b and
                      indexer.wq_b), torch-reference GEMMs
  v4flash-unfused     the same with the unfused path (norm to bf16, then each consumer quantizes)
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch

import mla_debug as md
from benchmarks.harness import environment, require_cuda

CASES = {
    "dsv3-cublas": ("deepseek-v3", "nvidia-cublas", None),
    "v4flash-fused": ("deepseek-v4-flash", "reference", True),
    "v4flash-unfused": ("deepseek-v4-flash", "reference", False),
}


def scenario_for(name: str, fused: bool | None) -> md.Scenario:
    scen = md.scenario(name)
    if fused is None:
        return scen
    behaviour = dataclasses.replace(scen.behaviour, v4_fused_norm_quant=fused)
    return dataclasses.replace(scen, name=f"{name}-{'fused' if fused else 'unfused'}-norm-quant", behaviour=behaviour)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the traces (a fresh one per case inside)")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args(argv)
    require_cuda("gpu_profile_samples")
    print(environment("cuda"))
    checkpoints = {}
    for case, (model, scenario_name, fused) in CASES.items():
        cfg = md.MLAConfig.preset(model)
        if model not in checkpoints:
            checkpoints[model] = md.Checkpoint.synthetic(cfg, seed=0, progress=False)
        scen = scenario_for(scenario_name, fused)
        layer = md.MLALayer(cfg, checkpoints[model], 1, "h200", scen, device="cuda")
        hidden = torch.randn(args.tokens, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
        positions = torch.arange(args.tokens)
        layer.run(hidden, positions, "prefill")  # warm-up: weight decode, cuBLAS handles, allocator
        torch.cuda.synchronize()
        meta = dict(
            model=model,
            platform="h200",
            scenario=scen.name,
            tp=1,
            mode="prefill",
            tokens=args.tokens,
            device=torch.cuda.get_device_name(),
            case=case,
        )
        run, session = md.profile(layer.run, hidden, positions, "prefill", out_dir=args.out, run_id=case, metadata=meta)
        torch.cuda.synchronize()
        trace = session.trace()
        steps = trace.per_step()
        print(f"== {case}: { ({linear: choice.kernel for linear, choice in run.kernels.items()}) }")
        print(steps.to_string())
        print("files:", [str(p.relative_to(Path(args.out))) for p in session.trace_paths])


if __name__ == "__main__":
    main()
