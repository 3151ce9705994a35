"""Faults a GPU node meets, each against the real component (issue #40 item 4): PostgreSQL
restarted mid-job, the disk filling while a unit writes. Nothing is lost or duplicated.
(A worker killed as the out-of-memory killer kills: tests/service/test_recovery.py; a cancel
while units run on two nodes: tests/service/test_cluster_faults.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from tests.helpers import (
    PG_BIN,
    Postgres,
    ThreadServer,
    make_settings,
    recorded,
    tiny_checkpoint,
    wait_for,
    wait_job,
)

TASK = {"name": "passkey", "lengths": [2048], "trials": 24, "seed": 7}


def sample_ids(c: httpx.Client, job_id: str) -> list[str]:
    return [json.loads(x)["id"] for x in c.get(f"/v1/jobs/{job_id}/samples").text.splitlines()]


@pytest.mark.timeout(240)
def test_postgres_restarted_mid_job_the_job_finishes_with_every_sample_once(ray_cluster: str, tmp_path: Path) -> None:
    if not (PG_BIN / "pg_ctl").exists():
        pytest.skip(f"no PostgreSQL binaries in {PG_BIN}")
    pg = Postgres().start()
    try:
        tiny_checkpoint(tmp_path / "models" / "tiny")
        settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="pg-restart",
                                 database_url=pg.url, engine_max_batch=1)
        with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
            job = c.post("/v1/jobs", json={"checkpoint": str(tmp_path / "models" / "tiny"), "tasks": [TASK]}).json()
            wait_for(lambda: recorded(settings.results, job["id"]) >= 2, 120, 0.01, "samples on disk")
            pg.run(str(PG_BIN / "pg_ctl"), "-D", str(pg.dir / "data"), "-m", "fast", "-w", "stop")
            for path in (f"/v1/jobs/{job['id']}", "/v1/jobs", "/readyz"):  # the API answers; never a 500
                down = c.get(path)
                assert down.status_code in (200, 503), (path, down.status_code, down.text)
                assert down.status_code == 200 or "Retry-After" in down.headers
            time.sleep(3)  # units go on recording while the database is away
            pg.start_again()
            done = wait_job(c, job["id"], timeout=150)
            assert done["status"] == "succeeded" and done["attempts"] == 1, done  # not requeued, not failed
            ids = sample_ids(c, job["id"])
            assert len(ids) == len(set(ids)) == TASK["trials"]
            assert c.get("/readyz").status_code == 200
            again = c.post("/v1/jobs", json={"checkpoint": str(tmp_path / "models" / "tiny"),
                                             "tasks": [{**TASK, "trials": 2}]})
            assert again.status_code == 202 and wait_job(c, again.json()["id"])["status"] == "succeeded"
    finally:
        pg.stop()
