"""mla_debug: find why a DeepSeek-style MLA model served with FP8 block-scaled kernels loses accuracy.

    import mla_debug as md

The package root holds the names most work needs - entry points, result types and the core types they
are made of. Everything else lives in its layer's package: ``md.layouts.unshuffle_weight``,
``md.kernels.TunedTable``, ``md.numerics.error_metrics``, ``md.scenarios.scenario_names``, ... (a name
that moved from here says where it went). The layers import only those below them:
numerics <- layouts <- gpu <- kernels, normquant <- model <- scenarios <- parallel <- capture <- verdict <-
triage, explain, profiling <- viz <- cli. Plotting imports lazily, so ``import mla_debug`` works on a bare GPU
box.

`md.capture` and `md.triage` are packages that are also callable: ``with md.capture(model, out, layer=3):
model(ids)`` records one layer of a running model (``md.capture.Capture``, ``md.capture.user_map``, ... are
its other names); ``md.triage(scenario=...)`` triages a layer across TP sizes (``md.triage.TriageSession``,
``md.triage.compare``, ...).

`write_html` comes from `viz` (the HTML report is drawn from a TriageReport, so triage never imports
viz): ``md.write_html(result, "triage.html")`` or ``md.write_html(md.load_triage(path), ...)``.
"""

from __future__ import annotations

# The layer packages are attributes of the root (md.kernels.TunedTable): the second tier of the API.
from . import (  # noqa: F401
    capture,
    explain,
    incidents,
    kernels,
    layouts,
    model,
    normquant,
    numerics,
    parallel,
    profiling,
    scenarios,
    triage,
    verdict,
    viz,
)
from ._version import __version__
from .capture import Capture, load_capture, scan
from .explain import compare_scans, diff_captures, explain_capture
from .kernels import Kernel, KernelPolicy, Platform, get_kernel, platform
from .layouts import (
    ContractViolation,
    QuantizedActivation,
    QuantizedWeight,
    ScaleLayout,
    WeightLayout,
    quantize_groups,
    shuffle_weight,
)
from .model import Checkpoint, MLAConfig, StepRecord
from .numerics import E4M3FN, E4M3FNUZ, Fp8Format
from .parallel import LayerRun, MLALayer, Patch, run_layer
from .profiling import Trace, compare_traces, load_trace, profile
from .scenarios import Scenario, scenario
from .triage import RunDiff, TriageReport, TriageResult, TriageSession, bisect, compare, load_triage
from .viz import write_html

__all__ = [
    # entry points
    "run_layer",
    "MLALayer",
    "Patch",
    "compare",
    "triage",
    "bisect",
    "profile",
    "load_trace",
    "compare_traces",
    "diff_captures",
    "explain_capture",
    "load_triage",
    "write_html",
    "capture",
    "load_capture",
    "scan",
    "compare_scans",
    # results
    "LayerRun",
    "StepRecord",
    "RunDiff",
    "TriageResult",
    "TriageReport",
    "Trace",
    "Capture",
    # what runs are made of
    "MLAConfig",
    "Checkpoint",
    "Scenario",
    "scenario",
    "TriageSession",
    "Platform",
    "platform",
    "Kernel",
    "KernelPolicy",
    "get_kernel",
    "Fp8Format",
    "E4M3FN",
    "E4M3FNUZ",
    "ScaleLayout",
    "WeightLayout",
    "QuantizedActivation",
    "QuantizedWeight",
    "ContractViolation",
    "quantize_groups",
    "shuffle_weight",
    "__version__",
]

# Names the package root gave before it kept only the surface above, and the package each lives in now.
_MOVED = {
    **dict.fromkeys(
        (
            "BlockScaledLinear GemmCall GemmProblem TunedTable apply_pre_quantized_block_scaled_mm "
            "detect_platform kernel_names platform_names"
        ).split(),
        "kernels",
    ),
    **dict.fromkeys(
        (
            "ViolationKind WeightTransform convert_scale identify_scale_layout identify_weight_layout "
            "present_scale quantize_blocks read_scale scale_as_read shuffle_period unshuffle_weight"
        ).split(),
        "layouts",
    ),
    **dict.fromkeys(
        "Fp8OverflowWarning QuantFlavor error_metrics fp8_format fp8_ulp_distance quant_flavor".split(), "numerics"
    ),
    "fused_qk_rmsnorm_group_quant": "normquant",
    "SCENARIOS": "scenarios",
    "scenario_names": "scenarios",
}


def __getattr__(name: str):
    if name in _MOVED:
        home = _MOVED[name]
        raise AttributeError(f"mla_debug.{name} lives in mla_debug.{home}: use md.{home}.{name}")
    raise AttributeError(f"module 'mla_debug' has no attribute {name!r}")
