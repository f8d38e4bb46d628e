"""Bisection over today's engines' kernels: vLLM 0.33's gfx1250 preshuffle honours only ``is_bmm`` by default,
so a run that used it is offered "honour the direct-read flags" as a code fix, and with a tuned preshuffle
config for kv_b_proj's per-rank shape the triage finds the absorbed-decode defect and that fix."""

from __future__ import annotations

import mla_debug as md
from mla_debug.kernels import KernelChoice
from mla_debug.triage.changes import HONOUR_FLAGS, candidate_changes

PRIORITY = ["aiter-triton-bpreshuffle", "aiter-triton-blockscale", "vllm-triton-blockscale"]


def test_a_kernel_ignoring_flags_by_default_is_offered_the_flag_fix():
    scen = md.scenario({"name": "x", "priority": PRIORITY})
    cfg = md.MLAConfig.preset("mini")
    used = {
        "kv_b_proj": KernelChoice("aiter-triton-bpreshuffle", "tuned"),
        "o_proj": KernelChoice("aiter-blockscale", ""),
    }
    fixes = [c for c in candidate_changes(scen, used, cfg) if c.kind == HONOUR_FLAGS]
    assert [(c.target, c.description) for c in fixes] == [
        ("aiter-triton-bpreshuffle", "honouring skip_weight_relayout in aiter-triton-bpreshuffle")
    ]
    # Told to honour them already, it is not offered again; kernels honouring by default never are.
    told = md.scenario(
        {"name": "y", "priority": PRIORITY, "kernel_options": {PRIORITY[0]: {"honour_layer_flags": True}}}
    )
    assert not [c for c in candidate_changes(told, used, cfg) if c.kind == HONOUR_FLAGS]


def test_gfx1250_kv_b_proj_with_a_tuned_preshuffle_config_breaks_absorbed_decode(tmp_path):
    cfg = md.MLAConfig.preset("mini")
    n = cfg.num_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim)
    (tmp_path / f"gfx1250-GEMM-A8W8_BLOCKSCALE_PRESHUFFLED-N={n}-K={cfg.kv_lora_rank}.json").write_text(
        '{"M_LEQ_4": {}}'
    )
    scen = md.scenario(
        {
            "name": "gfx1250-kv-b-proj",
            "priority": PRIORITY,
            "kernel_options": {"aiter-triton-blockscale": {"selection": "vllm-0.33"}},
            "triton_configs": str(tmp_path),
        }
    )
    result = md.triage("mini", "gfx1250", scen, tp_sizes=(1,), progress=False, device="cpu")
    assert [(c.mode, c.verdict) for c in result.configs] == [("prefill", "ok"), ("decode", "diverged")]
    (culprit,) = result.culprits
    assert (culprit.layer, culprit.step) == ("kv_b_proj", "absorb_uk")
    assert culprit.change == "honouring skip_weight_relayout in aiter-triton-bpreshuffle"
