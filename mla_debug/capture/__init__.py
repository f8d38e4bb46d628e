"""Recording one attention layer from a running model (any PyTorch module tree, engine name maps) and
loading the per-rank recordings back into TP-independent tensors.

The package is itself callable: ``md.capture(model, out, layer=3)`` is `recorder.capture` (the context
manager), while ``md.capture.Capture``, ``md.capture.user_map`` ... name the rest.

    with md.capture(model, "captures/tp1", layer=3, tokens=range(16)) as cap:
        model(input_ids)
    cap = md.load_capture("captures/tp1")

A scan records every decoder layer of one forward as compact summaries (``md.scan(model, out)``,
``load_scan``); folders SGLang's dumper wrote read as captures (``load_sglang_dump``, and
``md.load_capture`` recognizes them), and ``export_sglang_dump`` writes a capture in that layout.
"""

from __future__ import annotations

from .._callable_package import make_callable
from .canonical import DERIVED, DERIVED_SCALES, MODULES, CanonicalModule
from .load import load_capture
from .names import Argument, DerivedName, ModuleName, NameMap, builtin_maps, user_map
from .recorder import LayerCapture, capture, capture_call, record
from .roles import RankDisagreement, Shard, TensorRole
from .scan import ModelScan, scan
from .scan_store import load_scan
from .scan_types import Scan, ScanStep
from .sglang_dump import load_sglang_dump
from .sglang_dump_export import export_sglang_dump
from .types import (
    FORMAT_VERSION,
    Capture,
    CapturedTensor,
    CaptureManifest,
    EngineInfo,
    RankCapture,
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
    "ModelScan",
    "ModuleName",
    "NameMap",
    "RankCapture",
    "RankDisagreement",
    "Scan",
    "ScanStep",
    "Shard",
    "TensorRole",
    "Unrecorded",
    "UnrecordedReason",
    "builtin_maps",
    "capture",
    "capture_call",
    "load_capture",
    "load_sglang_dump",
    "export_sglang_dump",
    "load_scan",
    "record",
    "scan",
    "user_map",
]

make_callable(__name__, capture)
