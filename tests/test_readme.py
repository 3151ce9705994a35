"""The README stays a landing page and true, and so do the guide's pages (docs/): they point
at nothing outside the repository, every relative link resolves, and the figures stated about
the committed demo checkpoints are the checkpoints' own."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from checkpoints.fingerprint import inspect_checkpoint

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
PAGES = sorted((REPO / "docs").rglob("*.md"))


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"`((?:\.\./|/work/)[^`\s]*)`", text)


def test_readme_points_only_inside_the_repository() -> None:
    found = links(README)
    outside = [link for link in found if link.startswith(("../", "/work/", "/root/")) or "://" in link]
    assert not outside, f"README points outside the repository: {outside}"
    for link in found:
        if not re.match(r"#|mailto:", link):
            assert (REPO / link.split("#")[0]).exists(), f"README links to {link}, which does not exist"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO / "docs")))
def test_guide_links_resolve(page: Path) -> None:
    """A relative link of a page names a file of the repository, or a page docs/hooks.py generates."""
    generated = {REPO / "docs" / path for path in _hooks().GENERATED}
    for link in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+://|#|mailto:", link):
            continue
        target = (page.parent / link.split("#")[0]).resolve()
        assert target.is_relative_to(REPO), f"{page.name} points outside the repository: {link}"
        assert target.exists() or target in generated, f"{page.name} links to {link}, which does not exist"


def test_readme_is_a_landing_page() -> None:
    """At most 250 lines: the two commands first, a first finding, four short recipes (the
    fourth: a reasoning model thinking on and off, #47)."""
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    assert "bench/" not in README  # benchmarks live in the guide
    recipes = README.split("## Recipes", 1)[1].split("\n## ", 1)[0]
    sections = re.split(r"^### ", recipes, flags=re.M)[1:]
    assert len(sections) == 4
    for section in sections:  # a recipe: its commands in under 15 lines, a few lines of prose around them
        name, body = section.split("\n", 1)
        block = re.search(r"```bash\n(.*?)\n```", body, re.S)
        assert block and len(block.group(1).splitlines()) < 15, name
        prose = [x for x in body.replace(block.group(0), "").splitlines() if x.strip() and not x.startswith("<!--")]
        assert len(prose) <= 8, name

def test_demo_parameter_counts_are_the_checkpoints_own() -> None:
    page = (REPO / "docs" / "guide" / "demo-checkpoints.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| demo-(\w+) \| [^|]+ \| ([\d,]+) \|", page, flags=re.M)
    assert {name for name, _ in rows} == {p.name for p in (REPO / "demo" / "checkpoints").iterdir() if p.is_dir()}
    for name, count in rows:
        assert inspect_checkpoint(REPO / "demo" / "checkpoints" / name).parameters == int(count.replace(",", "")), name


def _task_list(text: str, start: str, end: str) -> str:
    """The lowercase letters and digits of the text from `start` to `end` (a sentence listing tasks)."""
    part = text[text.index(start):]
    part = part[:part.index(end) + len(end)]
    return re.sub(r"[^a-z0-9]", "", part.lower())


def test_the_readme_and_the_guide_name_every_registered_task() -> None:
    """A task added to the registry is named where a new user looks for what lctx runs: the README's
    opening, the guide's home page and the evaluators page's title (AA-LCR, MRCR v2 were missing)."""
    from evaluators.registry import registry

    lists = {
        "README.md": _task_list(README, "measures it against context length", "diagnostics."),
        "docs/index.md": _task_list((REPO / "docs" / "index.md").read_text(encoding="utf-8"),
                                    "measures retrieval and understanding", "diagnostics"),
        "docs/guide/evaluators.md": _task_list((REPO / "docs" / "guide" / "evaluators.md").read_text(encoding="utf-8"),
                                               "# Evaluators", "\n"),
    }
    for where, text in lists.items():
        missing = [name for name in registry() if re.sub(r"[^a-z0-9]", "", name) not in text]
        assert not missing, f"{where} does not name the tasks {missing}"
