"""Triage results shared by the viz tests, each computed once per session (about a second each).

tiny with kv_lora_rank 512 gets the preshuffled aiter GEMM for kv_b_proj on MI355X at every TP size, so
under vllm-pr51692 its absorbed decode reads a relaid weight and diverges, while prefill stays correct;
vllm-pr56433 (the fix) keeps every configuration clean.
"""

from __future__ import annotations

import re
from functools import cache

import mla_debug as md
from mla_debug.triage import TriageResult, TriageSession, triage
from mla_debug.viz.embed import PACKED_ID, unpack_plotlyjs

BUGGY, FIXED = "vllm-pr51692", "vllm-pr56433"
TP_SIZES = (1, 2)

# plotly.js starts with this banner comment; it appears once per bundle embedded as plain source.
PLOTLY_BANNER = re.compile(r"\* plotly\.js v\d+\.\d+\.\d+")


@cache
def session() -> TriageSession:
    cfg = md.MLAConfig.preset("tiny").with_(name="tiny-kv512", kv_lora_rank=512)
    return TriageSession(cfg, "mi355x", tokens=8)


@cache
def result(scenario: str = BUGGY) -> TriageResult:
    return triage(scenario=scenario, session=session(), tp_sizes=TP_SIZES, progress=False)


def without_plotly_bundle(text: str) -> str:
    """`text` with the inline plotly.js bundle cut out. The bundle itself holds default URLs as string
    constants (topojsonURL, map icons) that a heatmap never fetches; everything else must be offline."""
    return re.sub(r"<script[^>]*>\s*/\*\*\s*\* plotly\.js v.*?</script>", "<script>BUNDLE</script>", text, flags=re.S)


def plotlyjs_copies(page: str) -> int:
    """How many copies of plotly.js `page` embeds: as plain source, or packed (gzip + base64, then
    checked to unpack to the bundle plotly ships)."""
    from plotly.offline import get_plotlyjs

    packed = page.count(f'id="{PACKED_ID}"')
    if packed:
        assert unpack_plotlyjs(page) == get_plotlyjs()
    return len(PLOTLY_BANNER.findall(page)) + packed
