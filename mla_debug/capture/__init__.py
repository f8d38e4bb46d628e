"""Recording one attention layer from a running model (any PyTorch module tree, engine name maps) and
loading the per-rank recordings back into TP-independent tensors.

The package is itself callable: ``md.capture(model, out, layer=3)`` is `recorder.capture` (the context
manager), while ``md.capture.Capture``, ``md.capture.user_map`` ... name the rest.

    with md.capture(model, "captures/tp1", layer=3, tokens=range(16)) as cap:
        model(input_ids)
    cap = md.load_capture("captures/tp1")
"""

from __future__ import annotations

from .._callable_package import make_callable
from .canonical import DERIVED, DERIVED_SCALES, MODULES, CanonicalModule
from .load import load_capture
from .names import Argument, DerivedName, ModuleName, NameMap, builtin_maps, user_map
from .recorder import LayerCapture, capture, capture_call, record
from .types import (
    FORMAT_VERSION,
    Capture,
    CapturedTensor,
    CaptureManifest,
    EngineInfo,
    RankCapture,
    RankDisagreement,
    Shard,
    TensorRole,
    Unrecorded,
    UnrecordedReason,
)

__all__ = [
    "DERIVED",
    "DERIVED_SCALES",
    "FORMAT_VERSION",
    "MODULES",
    "Argument",
    "CanonicalModule",
    "Capture",
    "CaptureManifest",
    "CapturedTensor",
    "DerivedName",
    "EngineInfo",
    "LayerCapture",
    "ModuleName",
    "NameMap",
    "RankCapture",
    "RankDisagreement",
    "Shard",
    "TensorRole",
    "Unrecorded",
    "UnrecordedReason",
    "builtin_maps",
    "capture",
    "capture_call",
    "load_capture",
    "record",
    "user_map",
]

make_callable(__name__, capture)
