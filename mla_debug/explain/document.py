"""What the explain results saved as JSON share: a `kind` and a `schema` in the file, writing that never
overwrites, and reading back through the class's ``from_dict``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def check_document(data: dict[str, Any], kind: str, schemas: tuple[int, ...], what: str) -> None:
    """Raise a ValueError unless `data` is a `kind` document of one of `schemas` (`what` names it)."""
    if data.get("kind") != kind or data.get("schema") not in schemas:
        raise ValueError(
            f"not a {what} of schema {'/'.join(map(str, schemas))}: kind {data.get('kind')!r}, "
            f"schema {data.get('schema')!r}"
        )


class JsonDocument:
    """Base of a result written as one JSON document: the subclass gives ``to_dict`` and ``from_dict``."""

    def to_json(self, path: str | os.PathLike) -> Path:
        """Write as JSON, never overwriting (a taken name gets `-2`, `-3`, ...); returns the path written."""
        from .._files import write_atomically

        return write_atomically(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike):
        """The result saved at `path` (a ValueError when it is not JSON, or not this kind of result)."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err})") from None
        return cls.from_dict(data)
