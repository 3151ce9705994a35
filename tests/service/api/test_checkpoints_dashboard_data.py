"""What the dashboard reads beyond jobs and results: a checkpoint's family, RoPE and
context from its config (None, not an error, once the config is gone), and the jobs a
schedule submitted (`GET /v1/jobs?schedule=`)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.app import create_app
from service.schedules import ScheduleTicker
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint

pytestmark = pytest.mark.integration  # a server on loopback


def test_checkpoint_details_and_jobs_by_schedule(tmp_path: Path, models: Path) -> None:
    for step in (1, 2):
        tiny_checkpoint(models / "run" / f"step-{step}", seed=step)
    settings = make_settings(tmp_path)
    app = create_app(settings)
    with ThreadServer(app) as srv, httpx.Client(base_url=srv.url) as c:
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": str(models / "tiny")}).status_code == 201
        tiny = c.get("/v1/checkpoints/tiny").json()
        assert tiny["family"] == "lctx" and tiny["context_length"] == 2048
        assert tiny["rope"] == {"rope_theta": 10000.0, "rope_type": "default"}
        (models / "tiny" / "config.json").unlink()
        listed = {x["name"]: x for x in c.get("/v1/checkpoints").json()}
        assert listed["tiny"]["family"] is None and listed["tiny"]["rope"] is None

        suite = {"tasks": [{"name": "passkey", "lengths": [256], "trials": 1}]}
        assert c.post("/v1/schedules", json={"name": "nightly", "cron": "0 2 * * *", "watch": [str(models / "run")],
                                             "suite": suite}).status_code == 201
        c.post("/v1/jobs", json={"checkpoint": str(models / "run" / "step-1"), **suite})  # not the schedule's
        store = app.state.store
        submitted = ScheduleTicker(settings, store).tick(at=store.get_schedule("nightly").next_run_at)
        jobs = c.get("/v1/jobs", params={"schedule": "nightly"}).json()
        assert jobs["total"] == 2 and {j["id"] for j in jobs["items"]} == {j.id for j in submitted}
        assert all(j["schedule"] == "nightly" for j in jobs["items"])
        assert c.get("/v1/jobs", params={"schedule": "other"}).json()["total"] == 0
        assert c.get("/v1/jobs").json()["total"] == 3
        assert c.get("/v1/jobs", params={"schedule": "bad name!"}).status_code == 422
