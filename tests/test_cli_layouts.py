"""`mla-debug layouts`: byte forensics of saved tensors against a checkpoint or a dump, end to end."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import mla_debug as md
from mla_debug.cli import main

HF_PREFIX = "model.layers.{layer}.self_attn."


def table(out: str) -> dict[str, list[str]]:
    """Rows of the printed table by tensor name; columns are separated by two or more spaces."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("tensor  "))
    rows = {}
    for line in lines[start + 1 :]:
        if line.startswith("only in "):
            break
        cells = re.split(r"\s{2,}", line)
        rows[cells[0]] = cells
    return rows


@pytest.fixture(scope="module")
def tiny() -> md.Checkpoint:
    return md.Checkpoint.synthetic(md.MLAConfig.preset("tiny"), seed=0)


def observed_tensors(ckpt: md.Checkpoint) -> dict[str, torch.Tensor]:
    """The checkpoint as a serving process would hold it after the double-shuffle bug: kv_b_proj
    shuffled once (by the kernel), o_proj twice (by the model, then again by the kernel)."""
    tensors = {name: t.clone() for name, t in ckpt.tensors.items()}
    tensors["kv_b_proj.weight"] = md.shuffle_weight(tensors["kv_b_proj.weight"])
    tensors["o_proj.weight"] = md.shuffle_weight(md.shuffle_weight(tensors["o_proj.weight"]))
    return tensors


def test_dump_against_checkpoint_names_the_shuffles(tmp_path, tiny, capsys):
    reference = tiny.save(tmp_path / "ckpt")
    dump = tmp_path / "observed.safetensors"
    save_file(observed_tensors(tiny), str(dump))
    assert main(["layouts", str(dump), "--reference", str(reference)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"observed   {dump}: safetensors dump, 12 tensors"
    assert lines[1] == f"reference  {reference}: checkpoint ckpt layer 0, 12 tensors"
    rows = table(out)
    assert list(rows) == list(tiny.tensors)  # every tensor, in the layer's order, nothing "only in"
    assert rows["kv_b_proj.weight"] == [
        "kv_b_proj.weight",
        "(4096, 128)",
        "float8_e4m3fn",
        "shuffled once with (16, 16) (period 7)",
    ]
    assert rows["o_proj.weight"] == [
        "o_proj.weight",
        "(512, 2048)",
        "float8_e4m3fn",
        "shuffled 2 times with (16, 16) (period 11)",
    ]
    assert rows["q_a_proj.weight"][3] == "plain (bytes equal the reference)"
    # q_b_proj's rows are 256 bytes: the shuffle is an involution there, and the line says so.
    assert rows["q_b_proj.weight"][3] == (
        "plain (bytes equal the reference); 2 shuffles with (16, 16) look the same here (period 2)"
    )
    plain = [name for name, cells in rows.items() if cells[3] == "plain (bytes equal the reference)"]
    assert sorted(plain) == sorted(set(tiny.tensors) - {"kv_b_proj.weight", "o_proj.weight", "q_b_proj.weight"})
    # The column widths line up: every row's dtype column starts where the header's does.
    column = lines[2].index("dtype")
    assert all(line[column:].startswith(("float", "bfloat")) for line in lines[3:])


def test_hf_prefixed_dump_picks_its_layer_for_both_sides(tmp_path, capsys):
    ckpt = md.Checkpoint.synthetic(md.MLAConfig.preset("tiny"), seed=1, layer=5)
    reference = ckpt.save(tmp_path / "ckpt5")
    tensors = observed_tensors(ckpt)
    tensors["q_a_proj.weight"] = tensors["q_a_proj.weight"][:128].clone()  # truncated
    tensors["kv_a_proj_with_mqa.weight"] = (
        tensors["kv_a_proj_with_mqa.weight"].view(torch.uint8).flip(1).view(torch.float8_e4m3fn)
    )
    dump = tmp_path / "prefixed.safetensors"
    payload = {HF_PREFIX.format(layer=5) + name: t.contiguous() for name, t in tensors.items()}
    payload["model.layers.5.mlp.gate_proj.weight"] = torch.zeros(4, 4)
    save_file(payload, str(dump))
    assert main(["layouts", str(dump), "--reference", str(reference)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"observed   {dump}: safetensors dump, 13 tensors of layer 5"
    assert out.splitlines()[1] == f"reference  {reference}: checkpoint ckpt5 layer 5, 12 tensors"
    rows = table(out)
    assert rows["kv_b_proj.weight"][3] == "shuffled once with (16, 16) (period 7)"
    assert rows["q_a_proj.weight"][1:] == [
        "(128, 512)",
        "float8_e4m3fn",
        "shape differs: observed (128, 512), reference (256, 512)",
    ]
    assert rows["kv_a_proj_with_mqa.weight"][3] == (
        "unrelated bytes (neither plain nor 1-4 shuffles with (16, 16), 1 shuffle with (32, 16))"
    )
    assert out.splitlines()[-1] == "only in observed: mlp.gate_proj.weight"


def test_tensor_filter_and_layer_choice(tmp_path, tiny, capsys):
    reference = tiny.save(tmp_path / "ckpt")
    dump = tmp_path / "two-layers.safetensors"
    # Layer 0 as the serving process held it, layer 1 plain: only layer 0 shows the shuffles.
    layers = {0: observed_tensors(tiny), 1: {name: t.clone() for name, t in tiny.tensors.items()}}
    payload = {HF_PREFIX.format(layer=layer) + name: t for layer, ts in layers.items() for name, t in ts.items()}
    save_file(payload, str(dump))
    assert main(["layouts", str(dump), "--reference", str(reference)]) == 2
    assert "holds tensors of layers [0, 1]; choose one with --layer" in capsys.readouterr().err
    args = ["layouts", str(dump), "--reference", str(reference), "--layer", "0", "--tensor", "o_proj.weight"]
    assert main(args + ["kv_b_proj.weight"]) == 0
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0]
        == f"observed   {dump}: safetensors dump, 12 tensors of layer 0 (12 of other layers skipped)"
    )
    assert [cells[3] for cells in table(out).values()] == [
        "shuffled 2 times with (16, 16) (period 11)",
        "shuffled once with (16, 16) (period 7)",
    ]
    assert main(args + ["o_proj.bias"]) == 2
    assert capsys.readouterr().err.startswith("mla-debug layouts: error: --tensor o_proj.bias: not in OBSERVED; it has")


def test_activation_scales_are_matched_by_presentation(tmp_path, capsys):
    logical = torch.rand(16, 12, generator=torch.Generator().manual_seed(3)) + 0.5
    reference = tmp_path / "reference.safetensors"
    observed = tmp_path / "observed.safetensors"
    names = ("row_scale", "col.scale", "strided_scale", "other_scale", "one_scale")
    save_file({name: logical[:1].clone() if name == "one_scale" else logical.clone() for name in names}, str(reference))
    save_file(
        {
            "row_scale": md.layouts.present_scale(logical, "row_major"),
            "col.scale": md.layouts.present_scale(logical, "col_major"),
            # A COL_MAJOR_STRIDED buffer's memory, saved as the contiguous (G, M) tensor it really is.
            "strided_scale": md.layouts.present_scale(logical, "col_major_strided").t(),
            "other_scale": logical * 2,
            "one_scale": md.layouts.present_scale(logical[:1].clone(), "col_major"),
        },
        str(observed),
    )
    assert main(["layouts", str(observed), "--reference", str(reference)]) == 0
    rows = table(capsys.readouterr().out)
    assert {name: cells[3] for name, cells in rows.items()} == {
        "row_scale": "activation scale written ROW_MAJOR",
        "col.scale": "activation scale written COL_MAJOR (column-major bytes under ROW_MAJOR's shape and strides)",
        "strided_scale": "activation scale stored as its (G, M) transpose: COL_MAJOR_STRIDED memory",
        "other_scale": "activation scale: unrelated bytes (no presentation of the reference's values)",
        "one_scale": "activation scale: ROW_MAJOR = COL_MAJOR = COL_MAJOR_STRIDED "
        "(M == 1 or G == 1: the presentations coincide)",
    }


def test_without_reference_lists_shapes_and_shuffle_targets(tmp_path, tiny, capsys):
    folder = tiny.save(tmp_path / "ckpt")
    assert main(["layouts", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"observed   {folder}: checkpoint ckpt layer 0, 12 tensors"
    assert out.splitlines()[1].split("  ")[-1] == "shuffle (16, 16) target"
    rows = table(out)
    assert rows["kv_b_proj.weight"] == ["kv_b_proj.weight", "(4096, 128)", "float8_e4m3fn", "yes"]
    assert rows["q_a_layernorm.weight"][1:] == ["(256,)", "bfloat16", "no (1-D)"]
    assert rows["kv_b_proj.weight_scale_inv"][3] == "no: K=1 is not a multiple of 32"
    assert rows["q_b_proj.weight_scale_inv"][3] == "no: N=24 is not a multiple of 16, K=2 is not a multiple of 32"
    assert "bytes against" not in out


@pytest.mark.parametrize("suffix", [".pt", ".bin"])
@pytest.mark.parametrize("role", ["OBSERVED", "REF"])
def test_pickle_files_are_refused(tmp_path, tiny, capsys, suffix, role):
    pickled = tmp_path / f"weights{suffix}"
    torch.save({"o_proj.weight": torch.zeros(2, 2)}, pickled)
    dump = tmp_path / "d.safetensors"
    save_file({"o_proj.weight": torch.zeros(2, 2)}, str(dump))
    args = ["layouts", str(pickled)] if role == "OBSERVED" else ["layouts", str(dump), "--reference", str(pickled)]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"mla-debug layouts: error: {role} {pickled}: {suffix} files are pickles and are refused, because "
        "unpickling can execute arbitrary code; save the tensors with safetensors.torch.save_file instead\n"
    )


def test_missing_and_unreadable_inputs_are_clear_errors(tmp_path, capsys):
    missing = tmp_path / "nothing.safetensors"
    assert main(["layouts", str(missing)]) == 2
    assert capsys.readouterr().err == f"mla-debug layouts: error: OBSERVED {missing} does not exist\n"
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    assert main(["layouts", str(garbage)]) == 2
    assert capsys.readouterr().err.startswith(
        f"mla-debug layouts: error: OBSERVED {garbage} (16 bytes): its 8-byte header is not a safetensors header ("
    )
    folder = tmp_path / "no-config"
    folder.mkdir()
    dump = tmp_path / "d.safetensors"
    save_file({"o_proj.weight": torch.zeros(2, 2)}, str(dump))
    assert main(["layouts", str(dump), "--reference", str(folder)]) == 2
    assert "a checkpoint folder needs its config.json" in capsys.readouterr().err
    notes = Path(tmp_path) / "notes.txt"
    notes.write_text("hello")
    assert main(["layouts", str(notes)]) == 2
    assert capsys.readouterr().err.endswith("neither a checkpoint folder nor a .safetensors file\n")


@pytest.mark.parametrize("index", [True, False], ids=["with-index", "plain-files"])
@pytest.mark.parametrize("role", ["OBSERVED", "REF"])
def test_truncated_checkpoint_file_is_named_with_what_is_wrong(tmp_path, tiny, capsys, index, role):
    folder = tiny.save(tmp_path / "ckpt")
    if not index:
        (folder / "model.safetensors.index.json").unlink()
    shard = folder / "model.safetensors"
    os.truncate(shard, shard.stat().st_size - 1000)  # a copy cut short
    intact = tiny.save(tmp_path / "intact")
    argv = (
        [str(folder), "--reference", str(intact)] if role == "OBSERVED" else [str(intact), "--reference", str(folder)]
    )
    assert main(["layouts", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"mla-debug layouts: error: Checkpoint.load: {shard} (")
    assert captured.err.rstrip().endswith("the file holds 2,589,080: truncated (an interrupted download or copy?)")
    assert "Traceback" not in captured.err


def test_truncated_dump_is_named_with_what_is_wrong(tmp_path, tiny, capsys):
    dump = tmp_path / "observed.safetensors"
    save_file(dict(tiny.tensors), str(dump))
    os.truncate(dump, 5)
    assert main(["layouts", str(dump)]) == 2
    assert capsys.readouterr().err == (
        f"mla-debug layouts: error: OBSERVED {dump} holds 5 bytes, fewer than the 8-byte header length a "
        "safetensors file starts with: truncated, or not a safetensors file\n"
    )
