"""Scale presentations (and the engines' re-layouts of them), weight shuffles, VNNI packing, layout histories, layout
contracts and forensics."""

from .contracts import (
    ConsumerOrders,
    ContractViolation,
    ShuffleExpectation,
    ViolationKind,
    scale_order_violation,
    weight_layout_from_text,
    weight_read_violation,
)
from .forensics import (
    ShuffleAttempt,
    ShuffleFit,
    TensorComparison,
    TensorVerdict,
    VerdictKind,
    WeightLayoutMatch,
    compare_tensor,
    compare_tensors,
    identify_scale_layout,
    identify_weight_layout,
    is_vnni_packing,
    shuffle_fit,
)
from .quantized import QuantizedActivation, QuantizedWeight, quantize_blocks, quantize_groups
from .scale_layout import (
    ScaleLayout,
    convert_scale,
    present_scale,
    read_scale,
    same_bytes,
    scale_as_read,
    scale_memory,
)
from .scale_read import ScaleRead
from .scale_relayout import relay_column_major, values_relaid
from .tma_scales import (
    is_tma_aligned_column_major,
    pack_ue8m0,
    tma_aligned_column_major,
    tma_aligned_size,
    unpack_ue8m0,
)
from .vnni import can_vnni_pack, vnni_pack, vnni_unpack
from .weight_layout import WeightLayout, WeightTransform
from .weight_shuffle import LAYOUTS, is_involution, pad_k, shuffle_period, shuffle_weight, unshuffle_weight

__all__ = [
    "LAYOUTS",
    "ConsumerOrders",
    "ContractViolation",
    "QuantizedActivation",
    "QuantizedWeight",
    "ScaleLayout",
    "ScaleRead",
    "ShuffleAttempt",
    "ShuffleExpectation",
    "ShuffleFit",
    "TensorComparison",
    "TensorVerdict",
    "VerdictKind",
    "ViolationKind",
    "WeightLayout",
    "WeightLayoutMatch",
    "WeightTransform",
    "can_vnni_pack",
    "compare_tensor",
    "compare_tensors",
    "convert_scale",
    "identify_scale_layout",
    "identify_weight_layout",
    "is_involution",
    "is_tma_aligned_column_major",
    "is_vnni_packing",
    "pack_ue8m0",
    "pad_k",
    "present_scale",
    "quantize_blocks",
    "quantize_groups",
    "read_scale",
    "relay_column_major",
    "same_bytes",
    "scale_as_read",
    "scale_memory",
    "scale_order_violation",
    "shuffle_fit",
    "shuffle_period",
    "shuffle_weight",
    "tma_aligned_column_major",
    "tma_aligned_size",
    "unpack_ue8m0",
    "unshuffle_weight",
    "values_relaid",
    "vnni_pack",
    "vnni_unpack",
    "weight_layout_from_text",
    "weight_read_violation",
]
