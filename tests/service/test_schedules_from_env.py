"""The nightly schedule of a deployment comes from the environment (LCTX_NIGHTLY_CRON,
_WATCH, _SUITE, _NAME): a real server started with those variables has it, a restart
keeps the stored one instead of duplicating or overwriting it, and a bad setting stops
start-up with a message naming the variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from service.core.settings import Settings
from service.schedules import ScheduleConfigError, ScheduleTicker, ensure_configured_schedule
from service.store import Store
from tests.helpers import ThreadServer, free_port, tiny_checkpoint

pytestmark = pytest.mark.integration  # `lctx serve`

SUITE = {"tasks": [{"name": "passkey", "lengths": [64], "trials": 1}], "rope": "yarn:2"}


def env_settings(monkeypatch: pytest.MonkeyPatch, tmp: Path, **env: str) -> Settings:
    """Settings read from LCTX_* variables, as `lctx serve` in the container reads them."""
    base = {"LCTX_HOME": str(tmp / "var"), "LCTX_CHECKPOINT_ROOTS": str(tmp / "models"),
            "LCTX_EXECUTOR": "false", "LCTX_SCHEDULER": "false"}
    for key, value in {**base, **env}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    settings.prepare()
    return settings


def test_schedule_from_the_environment_is_created_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runs = tmp_path / "models" / "runs"
    runs.mkdir(parents=True)
    settings = env_settings(monkeypatch, tmp_path, LCTX_NIGHTLY_CRON="0 2 * * *", LCTX_NIGHTLY_WATCH=str(runs),
                            LCTX_NIGHTLY_SUITE=json.dumps(SUITE))
    assert settings.nightly_suite == SUITE and settings.nightly_watch == [runs]
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        schedules = c.get("/v1/schedules").json()
        assert [s["name"] for s in schedules] == ["nightly"]
        created = schedules[0]
        assert created["cron"] == "0 2 * * *" and created["watch"] == ["runs"]
        assert created["suite"]["tasks"] == SUITE["tasks"] and created["suite"]["rope"] == "yarn:2"
        assert created["next_run_at"].endswith("02:00:00+00:00")

    # a restart with changed settings keeps the stored schedule (delete it to apply them)
    monkeypatch.delenv("LCTX_NIGHTLY_SUITE")
    settings = env_settings(monkeypatch, tmp_path, LCTX_NIGHTLY_CRON="30 3 * * *", LCTX_NIGHTLY_WATCH=str(runs))
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.get("/v1/schedules").json() == schedules
        assert c.delete("/v1/schedules/nightly").status_code == 204
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url) as c:
        (recreated,) = c.get("/v1/schedules").json()
        assert recreated["cron"] == "30 3 * * *" and recreated["suite"] == {"tasks": [{"name": "passkey"}],
                                                                             "backend": "auto", "priority": 0}

    # the schedule works like one made through the API: a new checkpoint, one job
    tiny_checkpoint(runs / "step-100")
    store = Store(settings.database)
    try:
        jobs = ScheduleTicker(settings, store).tick(store.get_schedule("nightly").next_run_at)
        assert [(j.checkpoint, j.schedule) for j in jobs] == [("step-100", "nightly")]
    finally:
        store.close()


def test_watch_defaults_to_the_checkpoint_roots_and_no_cron_means_no_schedule(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = env_settings(monkeypatch, tmp_path, LCTX_NIGHTLY_NAME="every-night")
    store = Store(settings.database)
    store.create_all()
    try:
        assert ensure_configured_schedule(store, settings) is None and store.list_schedules() == []
        monkeypatch.setenv("LCTX_NIGHTLY_CRON", "0 1 * * *")
        row = ensure_configured_schedule(store, Settings())
        assert row.name == "every-night" and row.watch == [str(settings.roots[0].resolve())]
    finally:
        store.close()


@pytest.mark.parametrize(("env", "needle"), [
    ({"LCTX_NIGHTLY_CRON": "every night"}, "use five"),
    ({"LCTX_NIGHTLY_CRON": "0 2 * * *", "LCTX_NIGHTLY_WATCH": "/etc"}, "outside the allowed roots"),
    ({"LCTX_NIGHTLY_CRON": "0 2 * * *", "LCTX_NIGHTLY_SUITE": '{"tasks": [{"name": "nope"}]}'}, "unknown task"),
    ({"LCTX_NIGHTLY_CRON": "0 2 * * *", "LCTX_NIGHTLY_SUITE": '{"tasks": []}'}, "at least 1"),
])
def test_a_bad_nightly_setting_stops_start_up_with_a_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             env: dict[str, str], needle: str) -> None:
    settings = env_settings(monkeypatch, tmp_path, **env)
    store = Store(settings.database)
    store.create_all()
    try:
        with pytest.raises(ScheduleConfigError, match="LCTX_NIGHTLY_CRON") as info:
            ensure_configured_schedule(store, settings)
        assert needle in str(info.value)
        assert store.list_schedules() == []
    finally:
        store.close()


def test_lctx_serve_refuses_to_start_with_a_bad_nightly_setting(tmp_path: Path) -> None:
    env = dict(os.environ, LCTX_HOME=str(tmp_path / "var"), LCTX_CHECKPOINT_ROOTS=str(tmp_path / "models"),
               LCTX_EXECUTOR="false", LCTX_SCHEDULER="false", LCTX_NIGHTLY_CRON="0 2 * * *",
               LCTX_NIGHTLY_WATCH="/etc")
    proc = subprocess.run([sys.executable, "-m", "cli.main", "serve", "--port", str(free_port())],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "LCTX_NIGHTLY_WATCH" in proc.stderr and "outside the allowed roots" in proc.stderr, proc.stderr
