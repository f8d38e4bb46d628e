"""Plain text (help strings, docstring summaries) made safe to place inside Markdown, code spans kept."""

from __future__ import annotations

import re

# A code span: a run of backticks, then text, then a run of the same length (``x`` as well as `x`).
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
ESCAPED = str.maketrans(
    {"\\": "\\\\", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]", "|": "\\|", "<": "&lt;", ">": "&gt;"}
)


def markdown_text(text: str) -> str:
    """`text` with Markdown's active characters escaped outside code spans, so it renders as written (a
    pipe in a code span does not split a table cell, so code spans are left as they are)."""
    out, last = [], 0
    for span in CODE_SPAN.finditer(text):
        out.append(text[last : span.start()].translate(ESCAPED))
        out.append(span.group(0))
        last = span.end()
    out.append(text[last:].translate(ESCAPED))
    return "".join(out)
