"""Plotly figures as offline HTML: figure fragments, plotly.js embedded once (plain or packed), and the
notebook setup whose figures survive `jupyter nbconvert --to html`."""

from __future__ import annotations

import re
import warnings

import plotly.graph_objects as go
import plotly.io as pio
import pytest
from plotly.offline import get_plotlyjs

from mla_debug.viz import embed, notebook, setup_notebook

PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"


def _figure(height: int | None = 321) -> go.Figure:
    return go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]), layout=dict(height=height, title=dict(text="a heatmap")))


@pytest.fixture
def plotly_default():
    """setup_notebook changes plotly's default renderers; put back what the other tests expect."""
    before = pio.renderers.default
    yield
    pio.renderers.default = before


def test_figure_html_draws_with_the_pages_plotlyjs_and_fetches_nothing():
    fragment = embed.figure_html(_figure())
    assert "Plotly.newPlot(" in fragment and "a heatmap" in fragment
    assert "height:321px" in fragment.replace(" ", "")
    assert "plotly.js v" not in fragment  # no bundle of its own
    assert not re.search(r"<script[^>]*\bsrc\s*=", fragment)
    assert "mathjax" not in fragment.lower()


def test_figure_html_of_a_figure_without_a_height_gets_the_default():
    fragment = embed.figure_html(_figure(height=None).to_dict())
    assert f"height:{embed.DEFAULT_HEIGHT_PX}px" in fragment.replace(" ", "")


def test_packed_plotlyjs_unpacks_to_the_bundle_and_is_deterministic():
    page = embed.packed_plotlyjs_html()
    assert embed.unpack_plotlyjs(page) == get_plotlyjs()
    assert embed.packed_plotlyjs() == embed.packed_plotlyjs.__wrapped__()  # same bytes when packed again
    assert len(page) < 0.5 * len(get_plotlyjs())
    assert not re.search(r"<script[^>]*\bsrc\s*=", page)
    assert embed.unpack_plotlyjs("<html>no bundle</html>") is None


def test_plotlyjs_version_is_read_from_the_bundle():
    assert re.fullmatch(r"v\d+\.\d+\.\d+", embed.plotlyjs_version())
    assert f"plotly.js {embed.plotlyjs_version()}" in get_plotlyjs()[:200]


def test_setup_notebook_adds_offline_html_to_the_plotly_mimetype(plotly_default, capsys):
    setup_notebook()
    shown = capsys.readouterr().out  # outside IPython, display() prints the text/plain part
    assert "plotly.js" in shown and "offline" in shown
    bundle = _figure()._repr_mimebundle_()
    assert PLOTLY_MIMETYPE in bundle
    assert "Plotly.newPlot(" in bundle["text/html"]
    assert "plotly.js v" not in bundle["text/html"]  # the bundle is in setup_notebook's output, once
    assert pio.renderers.default == notebook.DEFAULT_RENDERERS


def test_setup_notebook_twice_keeps_one_renderer(plotly_default, capsys):
    setup_notebook()
    setup_notebook()
    capsys.readouterr()
    assert list(pio.renderers).count(notebook.RENDERER) == 1
    assert set(_figure()._repr_mimebundle_()) == {PLOTLY_MIMETYPE, "text/html"}


def test_exported_notebook_keeps_every_figure_and_one_plotlyjs(plotly_default, capsys):
    """What `jupyter nbconvert --to html` does with the outputs setup_notebook and two figures make."""
    nbformat = pytest.importorskip("nbformat")
    exporters = pytest.importorskip("nbconvert.exporters")
    setup_notebook()
    capsys.readouterr()
    figures = [_figure(), go.Figure(go.Bar(y=[3, 1, 2]), layout=dict(title=dict(text="some bars")))]
    nb = nbformat.v4.new_notebook()
    setup_cell = nbformat.v4.new_code_cell("viz.setup_notebook()")
    setup_cell.outputs = [
        nbformat.v4.new_output(
            "display_data", data={"text/html": notebook.plotlyjs_html(), "text/plain": "plotly.js embedded"}
        )
    ]
    nb.cells.append(setup_cell)
    for fig in figures:
        cell = nbformat.v4.new_code_cell("fig")
        cell.outputs = [nbformat.v4.new_output("display_data", data=fig._repr_mimebundle_())]
        nb.cells.append(cell)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        page, _ = exporters.HTMLExporter().from_notebook_node(nb)
    assert not [w for w in caught if "not able to be represented" in str(w.message)]
    assert page.count("Plotly.newPlot(") == len(figures)
    assert "a heatmap" in page and "some bars" in page
    assert len(re.findall(r"\* plotly\.js v\d+\.\d+\.\d+", page)) == 1
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*\"[^\"]*plotly", page)
