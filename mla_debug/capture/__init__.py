"""Recording one attention layer from a running model (any PyTorch module tree, engine name maps) and
loading the per-rank recordings back into TP-independent tensors."""

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
)

__all__ = [
    "FORMAT_VERSION",
    "Capture",
    "CapturedTensor",
    "CaptureManifest",
    "EngineInfo",
    "RankCapture",
    "RankDisagreement",
    "Shard",
    "TensorRole",
]
