"""Plotly figures in a notebook that also survive its HTML export, offline.

    from mla_debug import viz
    viz.setup_notebook()   # once, in the first cell that imports mla_debug

JupyterLab and VS Code draw a plotly figure from plotly's own mimetype
(``application/vnd.plotly.v1+json``), but ``jupyter nbconvert --to html`` cannot represent that type
and leaves the figure blank. After `setup_notebook` every figure is displayed with both: the mimetype
for live frontends and an HTML fragment for exports. The fragments load nothing from the network: they
draw with the one copy of plotly.js that `setup_notebook` puts into its own cell's output.
"""

from __future__ import annotations

from typing import Any

from .embed import figure_html, plotlyjs_html, plotlyjs_version

RENDERER = "mla_debug_offline"
# plotly's own mimetype first: a live frontend that knows it prefers it to the HTML fragment.
DEFAULT_RENDERERS = f"plotly_mimetype+{RENDERER}"


def _offline_renderer():
    # plotly is imported here, not at module level, so `import mla_debug.viz` never needs it.
    from plotly.io.base_renderers import MimetypeRenderer

    class OfflineHtmlRenderer(MimetypeRenderer):
        """text/html of a figure that draws with the plotly.js already on the page: no bundle, and no
        MathJax link (plotly's own "notebook" renderer links MathJax from a CDN)."""

        def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, str]:
            return {"text/html": figure_html(fig_dict)}

    return OfflineHtmlRenderer()


def setup_notebook() -> None:
    """Make every plotly figure shown after this call survive `jupyter nbconvert --to html`, offline.

    Registers a renderer that adds an HTML fragment to plotly's mimetype, makes ``plotly_mimetype`` plus
    that renderer plotly's default, and displays plotly.js once, inline, in the calling cell's output
    (running the cell again replaces that output, so the notebook keeps one copy). Call it from a
    notebook cell that runs before the first figure.

    >>> from mla_debug import viz; viz.setup_notebook()
    """
    import plotly
    import plotly.io as pio
    from IPython.display import display

    if RENDERER not in pio.renderers:
        pio.renderers[RENDERER] = _offline_renderer()
    pio.renderers.default = DEFAULT_RENDERERS
    note = (
        f"plotly.js {plotlyjs_version()} (from plotly {plotly.__version__}) is embedded in this output, so an "
        "exported copy of this notebook draws its figures offline."
    )
    page = f'{plotlyjs_html()}\n<small style="color: #777">{note}</small>'
    display({"text/html": page, "text/plain": note}, raw=True)
