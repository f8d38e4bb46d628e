"""Folders written by SGLang 0.5.23's own dumper (sglang/srt/debug_utils/dumper.py from the released
wheel, run unmodified in the torchrun ranks of transformers' DeepSeek-V3 at TP2 and TP4) read into
Captures: the same bytes md.capture recorded in the same forward, and diff + explain find the planted
kv_b_proj relayout from the dumps alone. The name mapping's citations are checked against the wheel."""

from __future__ import annotations

import engine_wheels
import pytest
import torch
from scan_models import DEFECT_LAYER, TOKENS, dumped

import mla_debug as md
from mla_debug.capture import TensorRole
from mla_debug.capture.sglang_dump import RefusedDumpFile, read_record
from mla_debug.capture.sglang_dump_names import DumpName, all_maps, classify, module_paths
from mla_debug.explain.stories import StoryKind

pytest.importorskip("transformers")


def test_a_dump_reads_into_the_capture_of_the_same_forward_byte_for_byte(tp2, model_dir):
    from_dump = md.capture.load_sglang_dump(dumped(tp2), config=model_dir)
    captured = md.load_capture(tp2.capture)
    assert from_dump.tp_size == 2 and from_dump.manifest.layer == DEFECT_LAYER
    assert from_dump.manifest.positions == tuple(range(TOKENS))
    held = set(from_dump.names())
    assert {"layer.input", "q_b_proj.output", "kv_b_proj.output", "o_proj.input", "layer.output", "kv_b_proj.weight"} <= held
    for name in held:
        if name == "positions":
            continue
        for rank in (0, 1):
            ours, theirs = from_dump.rank(rank)[name], captured.rank(rank)[name]
            assert ours.shard is theirs.shard and ours.shard_dim == theirs.shard_dim, name
            assert ours.role is theirs.role, name
            assert torch.equal(ours.tensor.contiguous().view(torch.uint8), theirs.tensor.contiguous().view(torch.uint8)), name
    assert held - {"positions"} == set(captured.names()) - {"positions"}


def test_load_capture_recognizes_a_dump_folder(tp4, model_dir):
    folder = dumped(tp4)
    with pytest.raises(ValueError, match="pass config="):
        md.load_capture(folder)  # a transformers run records no model path; SGLang records its tokenizer path
    cap = md.capture.load_sglang_dump(folder / "dump", config=model_dir)  # the exp_name folder itself
    assert cap.tp_size == 4 and cap.gathered("kv_b_proj.weight").shape == (8 * 64, 128)


def test_diff_and_explain_find_the_planted_relayout_from_the_dumps_alone(tp2, tp4_planted, model_dir):
    a = md.capture.load_sglang_dump(dumped(tp2), config=model_dir)
    b = md.capture.load_sglang_dump(dumped(tp4_planted), config=model_dir)
    ckpt = md.Checkpoint.load(model_dir, layer=DEFECT_LAYER)
    diff = md.diff_captures(a, b, ckpt)
    assert "kv_b_proj" in diff.diverged_steps
    assert diff.weight("kv_b_proj.weight").difference.value == "layout"
    explanation = md.explain_capture(b, ckpt, diff=diff)
    assert StoryKind.WEIGHT_RELAID_READ_PLAIN in explanation.of("kv_b_proj").story


def test_a_file_that_needs_pickled_code_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "step=0___rank=0___dump_index=1___name=x.pt"
    torch.save({"value": _Booby(str(marker)), "meta": {}}, path)
    with pytest.raises(RefusedDumpFile, match=r"refused - it cannot be loaded with torch.load\(weights_only=True\)"):
        read_record(path)
    assert not marker.exists()


class _Booby:
    """Unpickling it would create a file: the proof that nothing of a refused file runs."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_sglang_names_map_to_canonical_tensors():
    maps = all_maps()
    base = "model.layers.7.self_attn"
    cases = {
        f"non_intrusive__{base}.fused_qkv_a_proj_with_mqa.output": DumpName("fused_qkv_a.output", 7, "fused_qkv_a_proj_with_mqa"),
        f"non_intrusive__{base}.kv_b_proj.inputs.0": DumpName("kv_b_proj.input", 7, "kv_b_proj"),
        f"non_intrusive__{base}.inputs.hidden_states": DumpName("layer.input", 7),
        f"non_intrusive__{base}.output": DumpName("layer.output", 7),
        f"param__{base}.kv_b_proj.weight_scale_inv": DumpName("kv_b_proj.weight_scale_inv", 7, "kv_b_proj", "weight"),
        "positions": DumpName("positions", 7, kind="positions"),
    }
    for name, expected in cases.items():
        assert classify(name, maps, 7) == expected, name
    for name in (f"non_intrusive__{base}.output.1", "non_intrusive__model.layers.7.mlp.output", "input_ids"):
        assert classify(name, maps, 7) is None, name
    # The maps never send one module path to two canonical modules.
    for path, canonical in module_paths(maps).items():
        assert all(e.canonical == canonical for m in maps for e in m.modules if e.path == path), path


CITED = {  # dumper.py line -> text it holds (sglang_dump_names' citations)
    140: 'dir: str = "/tmp/dumper"',
    147: "exp_name: Optional[str] = None",
    298: 'value_meta["dims"] = dims',
    334: 'name=f"{name_prefix}__{param_name}"',
    589: "full_kwargs = dict(",
    597: 'full_filename = _format_tags(full_kwargs) + ".pt"',
    614: '"value": value,',
    657: '_NAME_PREFIX = "non_intrusive__"',
    658: "_LAYER_NAME_RE",
    726: 'sub_name=f"inputs.{i}"',
    741: 'sub_name="output"',
    752: "if effective_key in self._core_fields:",
    767: "return {str(i): t for i, t in enumerate(tensors)}",
    1299: 'return "___".join(f"{k}={v}" for k, v in kwargs.items())',
    1334: '"world_rank": _get_rank(),',
    1340: 'result[f"{plugin.name}_parallel_info"] = info',
    1732: 'info["tp_rank"] = parallel.tp_rank',
    1748: 'info["attn_tp_rank"] = parallel.attn_tp_rank',
    1751: 'info["attn_dp_size"] = parallel.attn_dp_size',
    1804: '{"input_ids", "positions", "seq_lens", "req_pool_indices", "rids"}',
    1903: '{"input_ids", "position_ids", "cu_seqlens_q", "cu_seqlens_kv", "qkv_format"}',
}


def test_the_cited_dumper_lines_say_what_the_mapping_reads():
    engine_wheels.require("sglang")
    lines = engine_wheels.source("sglang", "sglang/srt/debug_utils/dumper.py").splitlines()
    for number, text in CITED.items():
        assert text in lines[number - 1], (number, lines[number - 1])
    model = engine_wheels.source("sglang", "sglang/srt/models/deepseek_v2.py").splitlines()
    assert "hidden_states = self.self_attn(" in model[2814] and "positions=positions," in model[2815]


def test_a_dump_missing_a_rank_is_refused(tp2, model_dir, tmp_path):
    import shutil

    source = dumped(tp2) / "dump"
    partial = tmp_path / "partial"
    partial.mkdir()
    for file in source.glob("*rank=0___*.pt"):
        shutil.copy(file, partial / file.name)
    with pytest.raises(FileNotFoundError, match=r"TP2 dump but holds ranks \[0\] \(missing \[1\]\)"):
        md.capture.load_sglang_dump(partial, config=model_dir)


def test_roles_of_a_dump_capture(tp2, model_dir):
    cap = md.capture.load_sglang_dump(dumped(tp2), config=model_dir)
    assert cap.rank(0)["kv_b_proj.weight"].role is TensorRole.WEIGHT
    assert cap.rank(0)["kv_b_proj.output"].role is TensorRole.OUTPUT
