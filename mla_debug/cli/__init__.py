"""The `mla-debug` command: one module per subcommand, the argument groups they share in `args.py`."""

from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]
