"""Plotly figures as HTML that opens offline: figure fragments, and plotly.js embedded once per page.

    figure_html(fig)        # a div and the script that draws it with the page's plotly.js
    plotlyjs_html()         # plotly.js inline, as plotly ships it (~4.8 MB): notebooks
    packed_plotlyjs_html()  # plotly.js gzipped and base64-encoded (~2 MB), unpacked by the browser: reports

Nothing here links a CDN: a report mailed to someone or opened on an air-gapped machine draws its
figures. plotly is imported inside the functions, so importing this module never needs it.
"""

from __future__ import annotations

import base64
import functools
import gzip
from typing import Any

# A figure without a height of its own gets this one (every figure of this package sets its own).
DEFAULT_HEIGHT_PX = 450
# The element that holds the packed bundle; a page holds at most one.
PACKED_ID = "mla-debug-plotlyjs"
BROWSERS = "Chrome/Edge 80, Firefox 113, Safari 16.4 or later"


def figure_html(fig: Any, div_id: str | None = None) -> str:
    """The HTML fragment (a div and the script that fills it) of a plotly figure or figure dict, for a
    page that holds plotly.js once, elsewhere. Neither plotly.js nor MathJax is included or linked.
    `div_id` names the div (plotly's default is a random id: give one for a reproducible page)."""
    from plotly.io import to_html

    layout = fig.get("layout", {}) if isinstance(fig, dict) else fig.layout.to_plotly_json()
    height = layout.get("height") or DEFAULT_HEIGHT_PX
    return to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        include_mathjax=False,
        config={"displaylogo": False, "responsive": True},
        default_width="100%",
        default_height=f"{int(height)}px",
        validate=False,
        div_id=div_id,
    )


def _plotlyjs() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def plotlyjs_version() -> str:
    """The version of the plotly.js bundle plotly ships, from its banner ('v4.1.1'), or '?'."""
    head = _plotlyjs()[:200]
    start = head.find("plotly.js v")
    return head[start + len("plotly.js ") :].split()[0] if start >= 0 else "?"


def plotlyjs_html() -> str:
    """plotly.js as one inline script (no compression: it runs wherever scripts run)."""
    # window.PlotlyConfig first: the bundle reads it as it loads (MathJax 'local': none fetched).
    return f"<script>window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script>\n<script>{_plotlyjs()}</script>"


@functools.cache
def packed_plotlyjs() -> str:
    """plotly.js gzipped (level 9, no timestamp: the same bundle packs to the same bytes) in base64."""
    return base64.b64encode(gzip.compress(_plotlyjs().encode("utf-8"), 9, mtime=0)).decode("ascii")


# Figures after this loader call Plotly.newPlot before the bundle is unpacked (unpacking is
# asynchronous), so until then window.Plotly is a stand-in that queues those calls; the bundle then
# replaces it (it assigns window.Plotly) and the queued figures are drawn.
_LOADER = """<script>
(function () {
  var queued = [];
  window.PlotlyConfig = {MathJaxConfig: 'local'};
  window.Plotly = {newPlot: function () { queued.push(arguments); }};
  function fail(why) {
    var note = document.getElementById("%(id)s-error");
    note.textContent += ": " + why + ".";
    note.hidden = false;
  }
  if (typeof DecompressionStream === "undefined") { fail("no DecompressionStream"); return; }
  var packed = atob(document.getElementById("%(id)s").textContent.trim());
  var bytes = new Uint8Array(packed.length);
  for (var i = 0; i < packed.length; i++) { bytes[i] = packed.charCodeAt(i); }
  new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text()
    .then(function (source) {
      var script = document.createElement("script");
      script.textContent = source;
      document.head.appendChild(script);
      queued.forEach(function (args) { window.Plotly.newPlot.apply(window.Plotly, args); });
    })
    .catch(function (error) { fail(String(error)); });
})();
</script>"""


def packed_plotlyjs_html() -> str:
    """plotly.js for a standalone page, at about 40% of its size: the gzipped bundle in base64 and a
    loader that unpacks it in the browser (DecompressionStream) and then draws the page's figures.
    A browser without DecompressionStream shows a note where the figures would be."""
    version = plotlyjs_version()
    loader = _LOADER % {"id": PACKED_ID}
    return (
        f"<!-- plotly.js {version}, gzip + base64, unpacked by the script below -->\n"
        f'<p id="{PACKED_ID}-error" hidden style="color: #9b1c1c">The figures of this page need a browser '
        f"that can unpack the embedded plotly.js {version} ({BROWSERS})</p>\n"
        f'<script type="application/gzip;base64" id="{PACKED_ID}">{packed_plotlyjs()}</script>\n{loader}'
    )


def unpack_plotlyjs(page: str) -> str | None:
    """The plotly.js source packed into `page` by `packed_plotlyjs_html`, or None (for tests and tools
    that check what a report embeds)."""
    marker = f'id="{PACKED_ID}">'
    start = page.find(marker)
    if start < 0:
        return None
    start += len(marker)
    end = page.index("</script>", start)
    return gzip.decompress(base64.b64decode(page[start:end])).decode("utf-8")
