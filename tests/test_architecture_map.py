"""docs/architecture.md is the map of the code: every module of the packages appears in it, by
its file name or (in a folder's line, as the task folders are described) by its name beside its
folder's, so a new module is placed on the map when it is added."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("checkpoints", "clients", "training", "evaluators", "service", "cli")


def unmapped() -> list[str]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO)
            if path.name == "__init__.py" or "versions" in relative.parts:  # packages; alembic revisions
                continue
            named = path.name in text or (re.search(rf"\b{re.escape(path.stem)}\b", text)
                                          and f"{path.parent.name}/" in text)
            if not named:
                missing.append(str(relative))
    return missing


def test_every_module_is_on_the_map() -> None:
    assert unmapped() == [], "add these modules to docs/architecture.md: " + ", ".join(unmapped())
