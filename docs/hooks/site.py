"""mkdocs hook: the pages written from the code at build time, and links for semantics citations.

- cli.md: the `mla-debug` reference, from the argument parsers (`cli_reference`);
- api.md: the public surface of `mla_debug/__init__.py`, rendered by mkdocstrings (`api_reference`);
- results.md: benchmarks/RESULTS.md as it is in the checkout (measured figures live there, not in the
  pages, which link to it);
- engines.md: a stub only while the page is missing, so the navigation always resolves;
- architecture.md: its `<!-- layers -->` and `<!-- package-map -->` markers replaced by the layer
  contract of tests/test_layering.py and the map of every module (`package_map`);
- every "docs/semantics.md §N" in a page (docstrings included) becomes a link to that section.

Nothing here reads the network: the generators read the checkout with `ast` or argparse.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mkdocs.structure.files import File
from mkdocs.utils import get_relative_url

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (str(HERE), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

from api_reference import api_reference  # noqa: E402
from cli_reference import cli_reference  # noqa: E402
from package_map import layer_table, package_map  # noqa: E402

PACKAGE = ROOT / "mla_debug"
CONTRACT = ROOT / "tests" / "test_layering.py"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
CITATION = re.compile(r"docs/semantics\.md §(\d+)")

ENGINES_STUB = """# Engines and hazards

How mla_debug models released serving engines (vLLM 0.33.0, SGLang 0.5.23) as engine profiles, and the
hazards found by reading them. This page is being written; until then `data/engines/README.md` in the
checkout describes the profiles, and `mla-debug scenarios` lists them.
"""


def _cli_page() -> str:
    from mla_debug.cli.main import build_parser

    return cli_reference(build_parser())


def _api_page() -> str:
    import mla_debug

    return api_reference(mla_debug)


def on_files(files, config):
    generated = {
        "cli.md": _cli_page(),
        "api.md": _api_page(),
        "results.md": RESULTS.read_text(encoding="utf-8"),
    }
    if files.get_file_from_path("engines.md") is None:
        generated["engines.md"] = ENGINES_STUB
    for name, content in generated.items():
        if files.get_file_from_path(name) is not None:
            raise ValueError(f"docs/{name} exists, but the build writes {name} from the code: remove the file")
        files.append(File.generated(config, name, content=content))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "architecture.md":
        markdown = markdown.replace("<!-- layers -->", layer_table(CONTRACT, PACKAGE))
        markdown = markdown.replace("<!-- package-map -->", package_map(PACKAGE, CONTRACT))
    return markdown


def on_page_content(html, page, config, files):
    if page.file.src_uri == "semantics.md":
        return html
    target = get_relative_url("semantics/" if config["use_directory_urls"] else "semantics.html", page.url)

    def link(match: re.Match) -> str:
        return f'<a href="{target}#s{match.group(1)}">{match.group(0)}</a>'

    # Only outside tags and links already made (a citation inside an <a> is left alone).
    parts = re.split(r"(<a\b.*?</a>|<[^>]+>)", html, flags=re.S)
    return "".join(part if part.startswith("<") else CITATION.sub(link, part) for part in parts)
