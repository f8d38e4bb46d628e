"""A package that is also its own entry point: ``md.capture(model, out)`` and ``md.capture.Capture``,
``md.triage(...)`` and ``md.triage.TriageSession``. One name serves both so that the function and the
package it lives in never shadow each other (importing a submodule rebinds the parent's attribute)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType


def make_callable(module_name: str, entry: Callable) -> None:
    """Let the already-imported package `module_name` be called as `entry`."""

    class CallablePackage(ModuleType):
        __doc__ = sys.modules[module_name].__doc__

        def __call__(self, *args, **kwargs):
            return entry(*args, **kwargs)

    sys.modules[module_name].__class__ = CallablePackage
