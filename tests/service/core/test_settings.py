"""Settings come from LCTX_* variables; defaults put everything under ./var."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core.settings import Settings


def test_defaults_are_embedded_under_var(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("LCTX_HOME", "LCTX_DATABASE_URL", "LCTX_CHECKPOINT_ROOTS", "LCTX_API_TOKEN", "LCTX_HOST"):
        monkeypatch.delenv(key, raising=False)
    s = Settings()
    assert s.host == "127.0.0.1" and s.port == 8000
    assert s.database == f"sqlite:///{Path('var/lctx.db').absolute()}"
    assert s.results == Path("var/results").absolute()
    assert s.roots == [Path("var/checkpoints").absolute()]
    assert s.token is None and s.url == "http://127.0.0.1:8000"


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LCTX_DATABASE_URL", "postgresql+psycopg://u@db/lctx")
    monkeypatch.setenv("LCTX_CHECKPOINT_ROOTS", f"{tmp_path}/a,{tmp_path}/b")
    monkeypatch.setenv("LCTX_API_TOKEN", "s3cret")
    monkeypatch.setenv("LCTX_PORT", "9000")
    s = Settings()
    assert s.database == "postgresql+psycopg://u@db/lctx"
    assert s.roots == [tmp_path / "a", tmp_path / "b"]
    assert s.token == "s3cret" and "s3cret" not in repr(s)
    assert s.url == "http://127.0.0.1:9000"


def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LCTX_PORT", "not-a-port")
    with pytest.raises(ValueError, match="port"):
        Settings()


def test_the_settings_reference_lists_every_setting_with_its_meaning() -> None:
    """The guide's settings page (made by `make docs` from this class) has a row per field, with
    its default and its description."""
    from service.core.reference import settings_page

    page = settings_page()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `LCTX_")}
    missing = [f"LCTX_{name.upper()}" for name in Settings.model_fields if f"`LCTX_{name.upper()}`" not in rows]
    assert not missing, f"settings missing from the settings reference: {missing}"
    for name, info in Settings.model_fields.items():
        assert info.description, f"LCTX_{name.upper()} has no description for the settings reference"
        cells = [c.strip() for c in rows[f"`LCTX_{name.upper()}`"].split("|")[2:4]]
        assert all(cells), f"LCTX_{name.upper()}: a cell of its row is empty"
    assert "| `LCTX_PORT` | `8000` |" in page and "| `LCTX_DATABASE_URL` | sqlite:///&lt;home>/lctx.db |" in page
