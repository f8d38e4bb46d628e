"""SGLang 0.5.23's dumper layout, as data: file names, records, and which dump names are which canonical
tensors (facts read from the released wheel, sglang/srt/debug_utils/dumper.py unless said otherwise).

Files. One ``.pt`` file per dumped value, in ``<dir>/<exp_name>/`` (DumperConfig.dir l.140, exp_name
l.147, default ``dump_<time>``), named by its tags joined as ``k=v`` with ``___`` (_format_tags l.1298):
``step``, ``rank`` (the global rank), ``dump_index`` (l.589), then ``name``, ``recompute_status`` and the
context tags such as ``layer_id``, then ``.pt`` (l.597). The file is ``torch.save`` of a dict
``{"value": tensor, "meta": {...}}`` (l.613-618); meta repeats the tags and adds ``world_rank``,
``world_size`` (l.1334) and, in an SGLang server, ``sglang_parallel_info`` with ``tp_rank``/``tp_size``
(l.1340, l.1732; the attention's own group attn_tp_rank/attn_tp_size l.1748), and ``dims`` where the dump call gave them (l.298: the comparator's dims language,
e.g. ``"t h[tp]"``, ``"t h[tp:partial]"``, ``"t h # tp:replicated"``).

Names. The non-intrusive dumper (l.657-767) hooks every module: a module's positional inputs are
``non_intrusive__<module path>.inputs.<i>``, its keyword inputs ``...inputs.<keyword>``, its output
``...output`` (``...output.<i>`` when it returns several tensors, l.767); inside ``...layers.<N>`` the
tag ``layer_id`` is N (l.658). Core fields are dumped under their bare name instead (l.752):
``positions`` (SGLang plugin, l.1804) and ``position_ids`` (l.1903). ``dump_model`` names parameters
``param__<parameter path>`` (l.322-334).

Module paths under the attention module are read with mla_debug's name maps (data/engines/names/, each
citing its release): ``fused_qkv_a_proj_with_mqa`` is SGLang's fused q_a/kv_a linear, ``q_b_proj`` its q up-projection, and so on. The attention module itself is
called with keywords (SGLang: srt/models/deepseek_v2.py l.2815, ``positions=..., hidden_states=...``;
transformers: ``hidden_states=...``), so its input is ``...self_attn.inputs.hidden_states`` and its output
``...self_attn.output`` (transformers' eager attention also returns its weights: ``output.0``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import canonical as canon
from .names import LINEAR_TENSORS, NameMap, builtin_maps

RELEASE = "sglang 0.5.23"
SGLANG_MAP = "sglang-0.5.23"  # the name map of the release whose dumper this reads and writes
NON_INTRUSIVE_PREFIX = "non_intrusive__"  # dumper.py l.657
PARAM_PREFIX = "param__"  # dumper.py l.322-334
POSITION_NAMES = ("positions", "position_ids")  # core fields, dumper.py l.1804, l.1903
TAG_SEPARATOR = "___"  # dumper.py l.1299
DEFAULT_RECOMPUTE_STATUS = "disabled"  # _RecomputeStatus.DISABLED, the tag outside activation checkpointing
# The attention module's hidden-states input, by keyword or by the position the maps give.
HIDDEN_KEYWORD = "hidden_states"
_MODULE = re.compile(r"^(?P<prefix>(?:.+\.)?layers)\.(?P<layer>\d+)\.(?P<attention>[^.]+)(?:\.(?P<rest>.+))?$")


@dataclass(frozen=True)
class DumpName:
    """What one dump name is: the canonical tensor of one layer, or positions (layer None)."""

    canonical: str
    layer: int | None
    module_path: str = ""  # the path under the attention module ("" for the attention module itself)
    kind: str = "activation"  # "activation", "weight" or "positions"


def parse_file_name(stem: str) -> dict[str, str]:
    """A dump file name's tags (its name without .pt), as the dumper joined them."""
    tags = {}
    for part in stem.split(TAG_SEPARATOR):
        key, sep, value = part.partition("=")
        if sep:
            tags[key] = value
    return tags


def module_paths(maps: list[NameMap]) -> dict[str, str]:
    """{path under the attention module: canonical module} over `maps` (they never disagree)."""
    found: dict[str, str] = {}
    for name_map in maps:
        for entry in name_map.modules:
            found.setdefault(entry.path, entry.canonical)
    return found


def classify(name: str, maps: list[NameMap], layer_tag: int | None) -> DumpName | None:
    """The canonical tensor a dump name holds, or None for names outside an MLA attention module."""
    if name in POSITION_NAMES:
        return DumpName(canon.POSITIONS, layer_tag, kind="positions")
    attrs = {m.attention_attr for m in maps}
    paths = module_paths(maps)
    if name.startswith(PARAM_PREFIX):
        module, _, param = name[len(PARAM_PREFIX) :].rpartition(".")
        match = _MODULE.match(module)
        if not match or match.group("attention") not in attrs or param not in LINEAR_TENSORS:
            return None
        canonical = paths.get(match.group("rest") or "")
        if canonical is None or canonical == canon.ATTENTION:
            return None
        return DumpName(f"{canonical}.{LINEAR_TENSORS[param]}", int(match.group("layer")), match.group("rest"), "weight")
    if not name.startswith(NON_INTRUSIVE_PREFIX):
        return None
    body = name[len(NON_INTRUSIVE_PREFIX) :]
    for marker in (".inputs.", ".output"):
        module, sep, tail = body.partition(marker)
        if sep and (marker == ".inputs." or tail in ("", ".0")):
            break
    else:
        return None
    match = _MODULE.match(module)
    if not match or match.group("attention") not in attrs:
        return None
    layer, rest = int(match.group("layer")), match.group("rest") or ""
    is_input = marker == ".inputs."
    if not rest:
        if is_input:
            hidden = {HIDDEN_KEYWORD} | {str(m.hidden_arg.position) for m in maps if m.hidden_arg.position is not None}
            if tail in hidden:
                return DumpName(canon.LAYER_INPUT, layer)
            if tail in POSITION_NAMES:
                return DumpName(canon.POSITIONS, layer, kind="positions")
            return None
        return DumpName(canon.LAYER_OUTPUT, layer)
    canonical = paths.get(rest)
    if canonical is None or (is_input and tail != "0"):
        return None
    op = canon.MODULES[canonical].op
    return DumpName(f"{op}.{'input' if is_input else 'output'}", layer, rest)


def all_maps() -> list[NameMap]:
    return list(builtin_maps().values())


def export_name(canonical: str, layer: int, attention_path: str = "model.layers.{layer}.self_attn") -> str:
    """The dump name SGLang's dumper gives `canonical` of `layer` in SGLang's DeepSeek model (the SGLang
    map's module path; a module SGLang does not have keeps its canonical name as its path)."""
    sglang = builtin_maps()[SGLANG_MAP]
    base = attention_path.format(layer=layer)
    if canonical == canon.POSITIONS:
        return "positions"
    if canonical == canon.LAYER_INPUT:
        return f"{NON_INTRUSIVE_PREFIX}{base}.inputs.{HIDDEN_KEYWORD}"
    if canonical == canon.LAYER_OUTPUT:
        return f"{NON_INTRUSIVE_PREFIX}{base}.output"
    op, _, suffix = canonical.partition(".")
    module = canon.MODULES.get(op) or next((m for m in canon.MODULES.values() if m.op == op), None)
    if module is None:
        raise ValueError(f"export: {canonical!r} is not a canonical op tensor")
    path = next((e.path for e in sglang.modules if e.canonical == module.name), module.name)
    if suffix in ("input", "output"):
        return f"{NON_INTRUSIVE_PREFIX}{base}.{path}.{'inputs.0' if suffix == 'input' else 'output'}"
    return f"{PARAM_PREFIX}{base}.{path}.{suffix}"
