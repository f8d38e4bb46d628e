"""Fresh output names and atomic writes (mla_debug._files): nothing is overwritten, nothing is partial."""

from __future__ import annotations

import errno
import os

import pytest

from mla_debug import _files


def _hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_taken_name_gets_the_next_numbered_sibling(tmp_path):
    first = _files.write_atomically(tmp_path / "report.html", "one")
    second = _files.write_atomically(tmp_path / "report.html", "two")
    third = _files.write_atomically(tmp_path / "report.html", b"three")
    assert [p.name for p in (first, second, third)] == ["report.html", "report-2.html", "report-3.html"]
    assert [p.read_bytes() for p in (first, second, third)] == [b"one", b"two", b"three"]
    assert _hidden(tmp_path) == []


def test_numbers_go_before_the_suffix_a_writer_names(tmp_path):
    name = tmp_path / "host_1.123.pt.trace.json.gz"
    assert _files.sibling(name, 2, ".pt.trace.json.gz").name == "host_1.123-2.pt.trace.json.gz"
    assert _files.sibling(name, 2).name == "host_1.123.pt.trace.json-2.gz"
    assert _files.sibling(tmp_path / "run", 3, "").name == "run-3"
    with pytest.raises(ValueError, match=r"does not end in '\.json'"):
        _files.sibling(tmp_path / "x.html", 2, ".json")


def test_a_failed_write_leaves_no_file_and_no_temporary(tmp_path):
    with pytest.raises(UnicodeEncodeError):
        _files.write_atomically(tmp_path / "report.json", "fine until \ud800")  # a lone surrogate: no UTF-8
    assert list(tmp_path.iterdir()) == []


def test_a_name_taken_while_writing_is_not_overwritten(tmp_path, monkeypatch):
    real_link = os.link
    calls = []

    def racing_link(src, dst):
        calls.append(os.path.basename(dst))
        if len(calls) == 1:  # another writer takes the name between the check and the link
            with open(dst, "w") as other:
                other.write("theirs")
        return real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    written = _files.write_atomically(tmp_path / "triage.json", "ours")
    assert calls == ["triage.json", "triage-2.json"] and written.name == "triage-2.json"
    assert (tmp_path / "triage.json").read_text() == "theirs" and written.read_text() == "ours"
    assert _hidden(tmp_path) == []


def test_without_hard_links_the_name_is_still_taken_exclusively(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    (tmp_path / "a.json").write_text("user's")
    written = _files.write_atomically(tmp_path / "a.json", "new")
    assert written.name == "a-2.json" and written.read_text() == "new"
    assert (tmp_path / "a.json").read_text() == "user's" and _hidden(tmp_path) == []

    def broken(src, dst):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "link", broken)
    with pytest.raises(OSError, match="I/O error"):
        _files.write_atomically(tmp_path / "b.json", "x")
    assert not (tmp_path / "b.json").exists() and _hidden(tmp_path) == []


def test_folders_are_fresh_or_refused(tmp_path):
    first = _files.fresh_folder(tmp_path / "deep" / "run")
    second = _files.fresh_folder(tmp_path / "deep" / "run")
    assert (first.name, second.name) == ("run", "run-2") and first.is_dir() and second.is_dir()
    with pytest.raises(FileExistsError):
        _files.create_folder(first)
    (tmp_path / "file").write_text("x")
    assert _files.fresh_folder(tmp_path / "file").name == "file-2"  # a file takes the name too


def test_a_folder_is_published_whole_or_not_at_all(tmp_path):
    with _files.folder_atomically(tmp_path / "ckpt") as partial:
        (partial / "a.txt").write_text("a")
        assert not (tmp_path / "ckpt").exists()
    assert (tmp_path / "ckpt" / "a.txt").read_text() == "a" and _hidden(tmp_path) == []

    with pytest.raises(RuntimeError, match="interrupted"):
        with _files.folder_atomically(tmp_path / "other") as partial:
            (partial / "a.txt").write_text("a")
            raise RuntimeError("interrupted")
    assert not (tmp_path / "other").exists() and _hidden(tmp_path) == []

    (tmp_path / "empty").mkdir()
    with _files.folder_atomically(tmp_path / "empty") as partial:
        (partial / "b.txt").write_text("b")
    assert (tmp_path / "empty" / "b.txt").exists()

    with pytest.raises(FileExistsError, match="already exists and is not an empty folder"):
        with _files.folder_atomically(tmp_path / "ckpt"):
            raise AssertionError("never entered: the folder holds a user's files")
    assert (tmp_path / "ckpt" / "a.txt").read_text() == "a"


def test_a_folder_filled_by_someone_else_meanwhile_is_kept(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(FileExistsError, match="filled by someone else"):
        with _files.folder_atomically(target) as partial:
            (partial / "mine").write_text("mine")
            target.mkdir()
            (target / "theirs").write_text("theirs")
    assert [p.name for p in target.iterdir()] == ["theirs"] and _hidden(tmp_path) == []
