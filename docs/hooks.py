"""MkDocs hooks of the guide (mkdocs.yml): the guide's pages at the site's top level, the
generated reference pages, the benchmark plots of bench/results, and the links of pages that
reach them from the repository."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
PLOTS = "bench/results"  # committed plots, published at the same path inside the site
# Generated pages: path inside the site -> the function of service/core/reference.py that writes it.
GENERATED = {"reference/settings.md": "settings_page", "reference/api.md": "api_page"}


def _generated(name: str) -> str:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from service.core import reference

    if name == "api_page":
        return reference.api_page(reference.app_openapi())
    return getattr(reference, name)()


def on_files(files: Files, config) -> Files:
    for f in files:  # docs/guide/x.md is served at /guide/x/, not /guide/guide/x/ (the site lives at /guide)
        if f.src_uri.startswith("guide/") and f.is_documentation_page():
            f.dest_uri = f.dest_uri.removeprefix("guide/")
            for derived in ("url", "abs_dest_path"):
                f.__dict__.pop(derived, None)
    for path, name in GENERATED.items():
        files.append(File.generated(config, path, content=_generated(name)))
    for plot in sorted((REPO / PLOTS).glob("*.png")):
        files.append(File(f"{PLOTS}/{plot.name}", str(REPO), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """A page in docs/guide/ links a plot as `../../bench/results/x.png` (true in the repository);
    in the site the plot is at bench/results/x.png of the site."""
    depth = page.file.src_uri.count("/")
    escaping = re.escape("../" * (depth + 1) + PLOTS + "/")
    return re.sub(rf"\]\({escaping}", "](" + "../" * depth + PLOTS + "/", markdown)
