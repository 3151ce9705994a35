"""Confinement to the configured roots: `..`, symlink escapes and outside paths refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core.errors import Forbidden, InvalidRequest
from service.core.paths import child, confine


def test_inside_root_resolves(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (root / "a").mkdir(parents=True)
    assert confine(str(root / "a"), [root]) == (root / "a").resolve()
    assert confine("a", [root]) == (root / "a").resolve()  # relative: to the first root


def test_dotdot_refused_even_when_it_stays_inside(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (root / "a").mkdir(parents=True)
    with pytest.raises(InvalidRequest, match=r"contains '\.\.'.*allowed roots"):
        confine(str(root / "a" / ".." / "a"), [root])
    with pytest.raises(InvalidRequest, match=r"'\.\.'"):
        confine("../../etc", [root])


def test_outside_and_symlink_escape_refused_naming_the_roots(tmp_path: Path) -> None:
    root, outside = tmp_path / "models", tmp_path / "secret"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(Forbidden, match=f"outside the allowed roots: {root}"):
        confine(str(outside), [root])
    with pytest.raises(Forbidden, match="outside the allowed roots"):
        confine(str(root / "link"), [root])
    with pytest.raises(Forbidden):
        confine("/etc", [root])


def test_prefix_sibling_is_not_inside(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (tmp_path / "models-evil").mkdir(parents=True)
    root.mkdir()
    with pytest.raises(Forbidden):
        confine(str(tmp_path / "models-evil"), [root])


def test_nul_and_empty_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest):
        confine("a\x00b", [tmp_path])
    with pytest.raises(InvalidRequest):
        confine("", [tmp_path])


def test_child_accepts_plain_names_only(tmp_path: Path) -> None:
    assert child(tmp_path, "accuracy.png") == (tmp_path / "accuracy.png").resolve()
    for bad in ("../x.png", "a/b.png", ".hidden", ""):
        with pytest.raises(InvalidRequest):
            child(tmp_path, bad)
    (tmp_path / "esc.png").symlink_to("/etc/passwd")
    with pytest.raises(Forbidden):
        child(tmp_path, "esc.png")
