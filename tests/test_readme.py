"""The README stays true: it points at nothing outside the repository, and the figures it
states about the committed demo checkpoints are the checkpoints' own."""

from __future__ import annotations

import re
from pathlib import Path

from checkpoints.fingerprint import inspect_checkpoint

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_points_only_inside_the_repository() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", README) + re.findall(r"`((?:\.\./|/work/)[^`\s]*)`", README)
    outside = [link for link in links if link.startswith(("../", "/work/", "/root/"))]
    assert not outside, f"README points outside the repository: {outside}"
    for link in links:
        if not re.match(r"[a-z]+://|#|mailto:", link):
            assert (REPO / link.split("#")[0]).exists(), f"README links to {link}, which does not exist"


def test_demo_parameter_counts_are_the_checkpoints_own() -> None:
    rows = re.findall(r"^\| demo-(\w+) \| [^|]+ \| ([\d,]+) \|", README, flags=re.M)
    assert {name for name, _ in rows} == {p.name for p in (REPO / "demo" / "checkpoints").iterdir() if p.is_dir()}
    for name, count in rows:
        assert inspect_checkpoint(REPO / "demo" / "checkpoints" / name).parameters == int(count.replace(",", "")), name
