"""Faults a GPU node meets, each against the real component (issue #40 item 4): PostgreSQL
restarted mid-job, the disk filling while a unit writes. Nothing is lost or duplicated.
(A worker killed as the out-of-memory killer kills: tests/service/runner/test_runner_recovery.py; a cancel
while units run on two nodes: tests/service/runner/test_runner_cluster_faults.py.)"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from service.core.layout import task_dir
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

pytestmark = pytest.mark.integration  # servers, Ray and PostgreSQL

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


def fill(path: Path) -> None:
    """Write zeros to `path` until the device holding it has no byte left."""
    with path.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0")
        except OSError:
            pass


@pytest.mark.timeout(240)
def test_the_disk_filling_while_a_unit_writes_fails_the_job_clearly_and_resume_finishes_it(
        ray_cluster: str, tmp_path: Path) -> None:
    """The results folder on a real 4 MiB tmpfs, filled to the last byte while a unit writes:
    the kernel's own ENOSPC, not a simulation. (Mounting needs root and CAP_SYS_ADMIN; where
    the kernel refuses it the test says so and skips: no other reproduction fills a real
    device without being one.)"""
    tiny_checkpoint(tmp_path / "models" / "tiny")
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="disk-full",
                             engine_max_batch=1)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "lctx-test-full", str(settings.results)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip()}): the disk-full test needs one")
    filler = settings.results / "filler"
    try:
        with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
            job = c.post("/v1/jobs", json={"checkpoint": str(tmp_path / "models" / "tiny"), "tasks": [TASK]}).json()
            wait_for(lambda: recorded(settings.results, job["id"]) >= 2, 120, 0.01, "samples on disk")
            fill(filler)
            failed = wait_job(c, job["id"], timeout=120)
            assert failed["status"] == "failed", failed
            error = failed["error"]
            assert "no space left" in error and f"$LCTX_HOME/results/{job['id']}/tasks/passkey/" in error, error
            assert f"/v1/jobs/{job['id']}/resume" in error and str(tmp_path) not in error
            folder = task_dir(settings, job["id"], "passkey")
            files = list(folder.rglob("*.jsonl"))
            for f in files:  # every line whole: a write the disk cut short was taken back
                assert all(line.endswith(b"}") for line in f.read_bytes().split(b"\n")[:-1]), f
                assert f.read_bytes().endswith(b"\n") or not f.read_bytes(), f
            before = sum(len(f.read_bytes().splitlines()) for f in files)
            assert before >= 2
            notes_before = set((folder / "units").glob("*.json"))

            filler.unlink()  # room again
            r = c.post(f"/v1/jobs/{job['id']}/resume")
            assert r.status_code == 200 and r.json()["status"] == "queued", r.text
            done = wait_job(c, job["id"], timeout=150)
            assert done["status"] == "succeeded" and done["attempts"] == 2, done
            ids = sample_ids(c, job["id"])
            assert len(ids) == len(set(ids)) == TASK["trials"]
            resumed = [json.loads(f.read_text()) for f in set((folder / "units").glob("*.json")) - notes_before]
            assert sum(n["samples"] for n in resumed) == TASK["trials"] - before  # none recorded ran again
            assert c.post(f"/v1/jobs/{job['id']}/resume").status_code == 409  # only failed or cancelled jobs
    finally:
        subprocess.run(["umount", "-l", str(settings.results)], capture_output=True)
