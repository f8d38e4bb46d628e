"""`python -m mla_debug.cli ARGS` is `mla-debug ARGS`."""

from __future__ import annotations

from .main import main

raise SystemExit(main())
