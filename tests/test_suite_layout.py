"""The suite's own layout: pytest imports a test file by its basename (the test folders are not packages),
so two test files with one name stop the whole collection with an import-file mismatch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_file_name_is_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    twice = sorted(name for name, count in names.items() if count > 1)
    assert not twice, f"test files sharing a name (rename one): {twice}"
