"""Griffe extension for the API reference: docstrings written for `help()` made readable as Markdown.

The package's docstrings are plain text. Their `>>>` example lines would render as nested quotes
(Markdown reads `>` as a quote), so each run of `>>>` / `...` lines is wrapped in a `pycon` fence;
everything else is left as written (an indented block after `::` already reads as code in Markdown).
"""

from __future__ import annotations

import griffe


def fence_examples(text: str) -> str:
    out: list[str] = []
    in_example = False
    for line in text.splitlines():
        stripped = line.lstrip()
        is_example = stripped.startswith(">>>") or (in_example and stripped.startswith("..."))
        if is_example and not in_example:
            out.append("```pycon")
        if not is_example and in_example:
            out.append("```")
        out.append(stripped if is_example else line)
        in_example = is_example
    if in_example:
        out.append("```")
    return "\n".join(out)


class ExampleFences(griffe.Extension):
    def on_object(self, *, obj, loader, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_examples(obj.docstring.value)
