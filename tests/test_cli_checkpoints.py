"""The CLI on real-format checkpoints: DeepSeek-V3.2 (the shipped sample, data/checkpoints/tiny-v3.2-fp8)
through `triage` and `layouts`, --ignore-extra naming what it skips, a dense checkpoint refused unless
--quantize names a recipe, --start-position shown and checked - and the documented commands on the
sample (docs/triage.md), run as a user on a fresh clone runs them."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import mla_debug as md
from mla_debug.cli import main

REPO = Path(__file__).resolve().parents[1]
SAMPLE = md.scenarios.data_folder() / "checkpoints" / "tiny-v3.2-fp8"
FAST = ["--tp", "1", "4", "--modes", "decode", "--tokens", "8", "--no-bisect"]

sys.path.insert(0, str(REPO / "tests" / "model"))  # the checkpoint tests' shared builders
from ckpt_helpers import fp8_cast_bf16  # noqa: E402


def test_triage_of_the_v32_sample_says_the_indexer_is_not_modelled(capsys):
    assert main(["triage", "--checkpoint", str(SAMPLE), "--layer", "1", *FAST, "--start-position", "5000"]) == 0
    out = capsys.readouterr().out
    assert "tiny-v3.2-fp8 on mi355x under vllm-pr51692 (8 tokens at positions 5000..5007)" in out
    assert re.search(
        r"indexer present, not modelled: DeepSeek-V3\.2's sparse top-k indexer is not run \(its 7 "
        r"tensors in the checkpoint \(indexer\.k_norm\.bias, .*indexer\.wq_b\.weight_scale_inv\)",
        out,
    )
    assert "exact while no query sees more than index_topk=32 keys" in out
    assert re.search(r"4 +│ decode +│ diverged +│ absorb_uk", out)
    assert "8 tokens at positions 5000..5007, seed 0" in " ".join(out.split())  # the provenance line


def test_more_tokens_than_index_topk_are_said_in_red_and_warned(capsys):
    argv = ["triage", "--checkpoint", str(SAMPLE), "--layer", "1", "--tp", "1", "--modes", "prefill", "--tokens", "40"]
    with pytest.warns(md.model.indexer.SparseAttentionWarning):
        assert main([*argv, "--no-bisect"]) == 0
    out = capsys.readouterr().out
    assert "tokens above index_topk: 40 tokens exceed index_topk=32" in out


def test_layouts_of_the_v32_sample_names_the_indexer(capsys):
    assert main(["layouts", str(SAMPLE), "--layer", "1"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint tiny-v3.2-fp8 layer 1, 12 tensors; indexer present, not modelled" in out
    assert "7 tensors not read: indexer.k_norm.bias, indexer.k_norm.weight" in out
    assert re.search(r"kv_b_proj\.weight +\(4096, 256\) +float8_e4m3fn", out)


@pytest.fixture
def with_bias(tmp_path):
    folder = shutil.copytree(SAMPLE, tmp_path / "with-bias")
    key = "model.layers.1.self_attn.o_proj.bias"
    save_file({key: torch.zeros(256)}, str(folder / "bias.safetensors"))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"][key] = "bias.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_ignore_extra_skips_unknown_tensors_and_names_them(with_bias, capsys):
    assert main(["triage", "--checkpoint", str(with_bias), "--layer", "1", *FAST]) == 2
    err = capsys.readouterr().err
    assert "o_proj.bias'] are not part of a v3 attention layer" in err and "--ignore-extra" in err
    assert main(["triage", "--checkpoint", str(with_bias), "--layer", "1", *FAST, "--ignore-extra"]) == 0
    assert "tensors ignored: 1 attention tensor(s) this toolkit does not know were skipped" in capsys.readouterr().out
    assert main(["layouts", str(with_bias), "--layer", "1"]) == 2
    assert main(["layouts", str(with_bias), "--layer", "1", "--ignore-extra"]) == 0
    assert "ignored (--ignore-extra): o_proj.bias" in capsys.readouterr().out


def test_a_dense_checkpoint_is_refused_unless_quantize_names_a_recipe(tmp_path, capsys, monkeypatch):
    bf16 = fp8_cast_bf16(SAMPLE, tmp_path / "tiny-v3.2-bf16")
    assert main(["triage", "--checkpoint", str(bf16), "--layer", "1", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mla-debug triage: error: checkpoint ") and err.count("\n") == 1
    assert "holds dense (unquantized) linear weights" in err and "--quantize deepseek" in err
    assert main(["triage", "--checkpoint", str(bf16), "--layer", "1", *FAST, "--quantize", "deepseek"]) == 0
    out = capsys.readouterr().out
    assert (
        "weights quantized here: the checkpoint's dense linear weights were block-quantized before the triage "
        "with the deepseek recipe (e4m3fn, 128x128 blocks" in out
    )
    assert "block-quantized here (deepseek recipe, e4m3fn, 128x128 blocks)" in " ".join(out.split())
    assert re.search(r"4 +│ decode +│ diverged", out)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--checkpoint", str(SAMPLE), "--quantize", "deepseek"], "holds FP8 weights with their own block scales"),
        (["--model", "tiny", "--quantize", "deepseek"], "synthetic weights are block-quantized already"),
        (["--model", "tiny", "--ignore-extra"], "--ignore-extra applies to a --checkpoint"),
        (["--checkpoint", str(SAMPLE), "--quantize", "aiter-hip"], "is not a recipe that quantizes 128x128"),
        (["--model", "tiny", "--start-position", "163830"], "past what tiny encodes: max_position_embeddings 163840"),
        (["--model", "tiny", "--start-position", "-3"], "start_position=-3 must be >= 0"),
    ],
    ids=["quantize-fp8", "quantize-synthetic", "ignore-synthetic", "bad-recipe", "past-max", "negative"],
)
def test_checkpoint_and_position_options_are_checked_before_any_weight(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(md.Checkpoint, "synthetic", lambda *a, **k: pytest.fail("weights built before the check"))
    monkeypatch.setattr(md.Checkpoint, "load", lambda *a, **k: pytest.fail("weights read before the check"))
    assert main(["triage", *argv]) == 2
    assert message in capsys.readouterr().err


def documented_checkpoint_commands() -> list[str]:
    """The `mla-debug` lines of the README's and the docs pages' bash blocks that run on the shipped
    sample checkpoint."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    blocks = [b for p in pages for b in re.findall(r"^```bash\n(.*?)^```$", p.read_text(), flags=re.S | re.M)]
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("mla-debug ") and "data/checkpoints/" in line]


def test_the_docs_show_commands_on_the_sample():
    commands = documented_checkpoint_commands()
    assert any(c.startswith("mla-debug triage") and "--start-position" in c for c in commands), commands
    assert any(c.startswith("mla-debug layouts") for c in commands), commands


@pytest.mark.slow
@pytest.mark.parametrize("command", documented_checkpoint_commands())
def test_documented_commands_on_the_sample_run_from_a_fresh_checkout(command, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(REPO)  # relative paths as in the docs: the checkout's root
    argv = shlex.split(command)[1:]
    for option in ("--report", "--json"):  # outputs go to a temporary folder, not the checkout
        if option in argv:
            argv[argv.index(option) + 1] = str(tmp_path / Path(argv[argv.index(option) + 1]).name)
    assert main(argv) == 0, capsys.readouterr().err
