"""The command line and the demo, run in-process."""

from __future__ import annotations

import subprocess
import sys

from mla_debug.cli import main


def test_kernel_demo_reproduces_the_three_bugs(capsys):
    assert main(["kernel-demo"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    m16 = [line for line in lines if line.strip().startswith("16  aiter-bpreshuffle")]
    assert any("ROW_MAJOR" in line and line.rstrip().endswith("WRONG") for line in m16)
    assert any("COL_MAJOR" in line and line.rstrip().endswith("ok") for line in m16)
    m1 = [line for line in lines if line.strip().startswith("1  aiter-bpreshuffle")]
    assert m1 and all(" ok" in line for line in m1)
    assert "shuffled 2 times with (16, 16)" in out
    assert "PR #51692 (flag ignored)" in out and "PR #56433 (flag honoured): weight plain" in out
    assert out.count("WRONG") == 3


def test_kernels_lists_every_kernel_with_its_flags(capsys):
    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    for name in ("torch-reference", "aiter-blockscale", "aiter-bpreshuffle", "cublas-blockwise"):
        assert name in out
    bpre = next(line for line in out.splitlines() if line.startswith("aiter-bpreshuffle "))
    assert bpre.split()[1:3] == ["yes", "yes"]


def test_select_explains_the_choice(capsys):
    assert main(["select", "3072x1536", "24576x1536", "--platform", "mi355x", "--layer", "q_b_proj", "--emulated"]) == 0
    out = capsys.readouterr().out
    assert "q_b_proj N=3072 K=1536: aiter-bpreshuffle" in out
    assert "q_b_proj N=24576 K=1536: aiter-blockscale" in out
    assert main(["select", "3072x1536", "--platform", "mi355x", "--before-pr51692", "--emulated"]) == 0
    assert "aiter-blockscale" in capsys.readouterr().out


def test_bad_input_is_a_clear_error(capsys):
    assert main(["select", "3072x1536", "--platform", "mi250"]) == 2
    assert "unknown platform 'mi250'; valid: cpu" in capsys.readouterr().err
    assert main(["select", "3072x1536", "--tuned", "/nonexistent/tuned.csv"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_module_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "mla_debug.cli", "kernels"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "aiter-bpreshuffle" in result.stdout


def test_demo_triages_and_writes_reports_to_a_fresh_folder(tmp_path, capsys):
    """`make demo` on a smaller model: mini has DeepSeek-V3's head structure, so kv_b_proj is
    preshuffled exactly from TP4 on and only decode at TP4 breaks under vLLM PR #51692."""
    from mla_debug.demo import main as demo_main

    args = ["--model", "mini", "--tp", "2", "4", "--tokens", "8", "--out", str(tmp_path)]
    assert demo_main(args) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines to the terminal width
    assert "kv_b_proj at TP4: aiter-bpreshuffle re-laid out the weight that absorbed decode" in out
    assert "restores decode" in out and "kv_b_proj at TP2" not in out
    assert "every TP size and mode matches the reference" in out  # the fixed scenario
    (folder,) = tmp_path.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == [
        "triage-vllm-pr51692.html",
        "triage-vllm-pr51692.json",
        "triage-vllm-pr56433.html",
        "triage-vllm-pr56433.json",
    ]
    assert demo_main(args) == 0  # a second run never reuses the first one's folder
    assert len(list(tmp_path.iterdir())) == 2


def test_triage_command_writes_json_and_html(tmp_path, capsys):
    report, js = tmp_path / "r.html", tmp_path / "r.json"
    report.write_text("a user's earlier report")
    args = [
        "triage",
        "--model",
        "mini",
        "--scenario",
        "vllm-pr51692",
        "--tp",
        "2",
        "4",
        "--tokens",
        "8",
        "--modes",
        "decode",
        "--report",
        str(report),
        "--json",
        str(js),
    ]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "diverged" in out and "culprit kv_b_proj at TP4" in out
    assert report.read_text() == "a user's earlier report"  # never overwritten
    assert (tmp_path / "r-2.html").stat().st_size > 100_000  # plotly.js embedded
    import json

    data = json.loads(js.read_text())
    assert [(r["tp"], r["mode"], r["verdict"]) for r in data["runs"]] == [
        (2, "decode", "ok"),
        (4, "decode", "diverged"),
    ]


def test_triage_command_bad_input(capsys):
    assert main(["triage", "--model", "deepseek-v9"]) == 2
    assert "unknown preset 'deepseek-v9'; valid: deepseek-v3" in capsys.readouterr().err
    assert main(["triage", "--model", "tiny", "--scenario", "nope"]) == 2
    assert "unknown scenario 'nope'; valid: reference" in capsys.readouterr().err
    assert main(["triage", "--model", "tiny", "--tp", "3"]) == 2
    assert "tp_size=3 does not divide num_heads=16" in capsys.readouterr().err
    assert main(["triage", "--model", "tiny", "--tokens", "0"]) == 2
    assert "tokens=0 must be >= 1" in capsys.readouterr().err
    if not __import__("torch").cuda.is_available():
        assert main(["triage", "--model", "tiny", "--device", "cuda"]) == 2
        assert "device='cuda' asked for, but torch sees no CUDA GPU" in capsys.readouterr().err


def test_triage_command_on_an_nvidia_platform_uses_the_triton_stand_ins(tmp_path, capsys):
    js = tmp_path / "h200.json"
    args = ["triage", "--model", "mini", "--platform", "h200", "--tp", "4", "--modes", "decode", "--tokens", "8"]
    assert main([*args, "--device", "cpu", "--json", str(js)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "culprit kv_b_proj at TP4: triton-bpreshuffle re-laid out" in out
    import json

    data = json.loads(js.read_text())
    assert data["platform"] == "h200" and data["device"] == "cpu"
    kernels = {s["name"]: s["kernel"] for s in data["runs"][0]["steps"]}
    assert kernels["o_proj"] == "triton-bpreshuffle" and kernels["q_b_proj"] == "triton-blockscale"


def test_triage_command_says_what_to_do_and_where_the_numbers_came_from(capsys):
    args = ["triage", "--model", "mini", "--tp", "4", "8", "--modes", "decode", "--tokens", "4"]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    # TP4 and TP8 decode fail the same way: one culprit block, its diagnosis said once.
    assert out.count("culprit kv_b_proj at TP4, TP8: aiter-bpreshuffle re-laid out") == 1
    assert "workaround now: VLLM_DISABLED_KERNELS=AiterPreshuffledFp8BlockScaledMMKernel restores decode" in out
    assert "code fix: honouring skip_weight_relayout in aiter-bpreshuffle restores decode" in out
    assert "known fix: vLLM PR #56433 (scenario vllm-pr56433) restores decode" in out
    assert "provenance: weights synthetic, seed 0; 4 tokens, seed 0; on cpu" in out
    assert "bisection: " in out and " trials (" in out
