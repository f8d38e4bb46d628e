"""mla_debug: find why a DeepSeek-style MLA model served with FP8 block-scaled kernels loses accuracy.

    import mla_debug as md

The package is layered (each layer imports only those before it): numerics -> layouts -> kernels.
Plotting and notebook helpers import lazily so ``import mla_debug`` works on a bare GPU box.
`write_html` comes from `viz` (the HTML report is drawn from a TriageReport, so analysis never
imports viz): ``md.write_html(result, "triage.html")`` or ``md.write_html(md.load_triage(path), ...)``.
"""

from __future__ import annotations

from ._version import __version__
from .analysis import RunDiff, TriageReport, TriageResult, Workbench, bisect, compare, load_triage, triage
from .kernels import (
    BlockScaledLinear,
    GemmCall,
    GemmProblem,
    Kernel,
    KernelPolicy,
    Platform,
    TunedTable,
    apply_pre_quantized_block_scaled_mm,
    detect_platform,
    get_kernel,
    kernel_names,
    platform,
    platform_names,
)
from .layouts import (
    ContractViolation,
    QuantizedActivation,
    QuantizedWeight,
    ScaleLayout,
    ViolationKind,
    WeightLayout,
    WeightTransform,
    convert_scale,
    identify_scale_layout,
    identify_weight_layout,
    present_scale,
    quantize_blocks,
    quantize_groups,
    read_scale,
    scale_as_read,
    shuffle_period,
    shuffle_weight,
    unshuffle_weight,
)
from .model import Checkpoint, MLAConfig
from .normquant import fused_qk_rmsnorm_group_quant
from .numerics import (
    E4M3FN,
    E4M3FNUZ,
    Fp8Format,
    Fp8OverflowWarning,
    QuantFlavor,
    error_metrics,
    fp8_format,
    fp8_ulp_distance,
    quant_flavor,
)
from .parallel import LayerRun, MLALayer, Patch, run_layer
from .profiling import Trace, compare_traces, load_trace, profile
from .scenarios import SCENARIOS, Scenario, scenario, scenario_names
from .viz import write_html

__all__ = [
    "E4M3FN",
    "E4M3FNUZ",
    "BlockScaledLinear",
    "RunDiff",
    "TriageReport",
    "TriageResult",
    "Workbench",
    "bisect",
    "compare",
    "compare_traces",
    "triage",
    "Checkpoint",
    "ContractViolation",
    "Fp8Format",
    "Fp8OverflowWarning",
    "GemmCall",
    "GemmProblem",
    "Kernel",
    "KernelPolicy",
    "LayerRun",
    "MLAConfig",
    "MLALayer",
    "Patch",
    "Platform",
    "QuantFlavor",
    "QuantizedActivation",
    "QuantizedWeight",
    "SCENARIOS",
    "Scenario",
    "Trace",
    "ScaleLayout",
    "TunedTable",
    "ViolationKind",
    "WeightLayout",
    "WeightTransform",
    "__version__",
    "apply_pre_quantized_block_scaled_mm",
    "convert_scale",
    "detect_platform",
    "error_metrics",
    "fp8_format",
    "fp8_ulp_distance",
    "fused_qk_rmsnorm_group_quant",
    "get_kernel",
    "identify_scale_layout",
    "identify_weight_layout",
    "kernel_names",
    "load_trace",
    "load_triage",
    "platform",
    "platform_names",
    "present_scale",
    "profile",
    "quant_flavor",
    "quantize_blocks",
    "quantize_groups",
    "read_scale",
    "run_layer",
    "scale_as_read",
    "scenario",
    "scenario_names",
    "shuffle_period",
    "shuffle_weight",
    "unshuffle_weight",
    "write_html",
]
