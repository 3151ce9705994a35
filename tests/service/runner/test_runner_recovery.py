"""Crash recovery: SIGKILL the worker running a job and the service process mid-way,
start the service again: the job resumes and finishes, every sample is recorded
exactly once, and results.json is valid. The service's dispatcher process (Ray's driver)
outlives the killed API only long enough to put the job back in the queue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service.core.layout import RESULTS_FILE, job_path, job_results, task_dir, task_path
from service.core.status import QUEUED
from service.runner.dispatcher import read_status
from service.runner.progress import unit_notes
from service.store import Store
from tests.helpers import KILL_MID_UNIT_BATCH, free_port, ready, recorded, tiny_checkpoint, wait_for, wait_job

pytestmark = pytest.mark.integration  # `lctx serve` and Ray


def start_service(tmp: Path, port: int, ray_address: str) -> subprocess.Popen:
    env = dict(os.environ, LCTX_HOME=str(tmp / "var"), LCTX_CHECKPOINT_ROOTS=str(tmp / "models"),
               LCTX_RAY_ADDRESS=ray_address, LCTX_REPLICA_ID="crash-test", LCTX_SCHEDULER="false",
               LCTX_POLL_INTERVAL="0.1", LCTX_ENGINE_MAX_BATCH=str(KILL_MID_UNIT_BATCH))
    log = (tmp / f"service-{port}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"],
                            cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)




def worker_pids(results: Path, job_id: str) -> set[int]:
    """The processes of the job's workers (each unit run notes its own)."""
    return {n["pid"] for n in unit_notes(task_path(results, job_id, "passkey"))}


@pytest.mark.timeout(240)
def test_killed_worker_and_service_resume_with_every_sample_once(ray_cluster: str, tmp_path: Path) -> None:
    tiny_checkpoint(tmp_path / "models" / "tiny")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_service(tmp_path, port, ray_cluster)
    try:
        wait_for(lambda: ready(url) or proc.poll() is not None, 90, 0.2, "service ready")
        log = (tmp_path / f"service-{port}.log").read_text()
        assert proc.poll() is None, log
        assert f"lctx API on {url}" in log and f"curl -s -X POST {url}/v1/jobs" in log  # what `make serve` prints
        with httpx.Client(base_url=url, timeout=30) as c:
            assert c.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
            job = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [
                {"name": "passkey", "lengths": [512], "trials": 32, "seed": 3}]}).json()
            # early in the job, so even a fast machine is still scoring when the kill lands
            wait_for(lambda: recorded(tmp_path / "var" / "results", job["id"]) >= 2, 120, 0.01, "samples on disk")
        workers = worker_pids(tmp_path / "var" / "results", job["id"])
        dispatcher = read_status(tmp_path / "var" / "dispatcher.json")["pid"]
        proc.send_signal(signal.SIGKILL)  # the service first, so nobody sees the worker die
        proc.wait(30)
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # Ray already took the dead driver's workers down
        # no orphan: the dispatcher sees its pipe from the API close, requeues the job and exits
        wait_for(lambda: not Path(f"/proc/{dispatcher}").exists(), 60, 0.1, "the orphaned dispatcher to exit")
        store = Store(f"sqlite:///{tmp_path / 'var' / 'lctx.db'}")
        assert store.get_job(job["id"]).status == QUEUED
        store.close()

        proc = start_service(tmp_path, port, ray_cluster)
        wait_for(lambda: ready(url) or proc.poll() is not None, 90, 0.2, "service ready again")
        with httpx.Client(base_url=url, timeout=30) as c:
            done = wait_job(c, job["id"], timeout=150)
            assert done["status"] == "succeeded", done
            assert done["attempts"] == 2
            results = c.get(f"/v1/jobs/{job['id']}/results").json()
            records = [json.loads(x) for x in c.get(f"/v1/jobs/{job['id']}/samples").text.splitlines()]
        total = done["progress"]["passkey"]["total"]
        ids = [r["id"] for r in records]
        assert len(ids) == total == len(set(ids))  # every sample exactly once
        results_file = job_path(tmp_path / "var" / "results", job["id"]) / RESULTS_FILE
        on_disk = json.loads(results_file.read_text())  # the API shows the same, with paths relative to the roots
        assert on_disk["results"]["passkey"]["result"] == results["results"]["passkey"]["result"]
        assert on_disk["checkpoint"]["path"] == str(tmp_path / "models" / "tiny") and results["checkpoint"]["path"] == "tiny"
        assert not list(results_file.parent.glob(".*.tmp"))
    finally:
        proc.kill()
        proc.wait(30)


@pytest.mark.timeout(180)
def test_a_worker_killed_as_the_oom_killer_kills_reruns_its_unit_at_half_the_batch(ray_cluster: str,
                                                                                     tmp_path: Path) -> None:
    """SIGKILL, what the kernel's out-of-memory killer sends, to a worker holding a decoding
    batch of 8: the unit runs again on a fresh worker at batch 4 with only its unfinished
    samples; a unit whose workers keep being killed fails the job with an error that names
    memory and the batches it tried."""
    from service.app import create_app
    from tests.helpers import ThreadServer, make_settings

    tiny_checkpoint(tmp_path / "models" / "tiny")
    # one unit of 64 samples, eight decoding waves: records reach the coordinator twice a second while
    # the unit runs, so the kill after the first ones lands with most of the unit still to run
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="retry-test",
                             max_attempts=2, engine_max_batch=8, unit_tokens=1_000_000)
    task = {"name": "passkey", "lengths": [2048], "trials": 64, "seed": 4}
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        job = c.post("/v1/jobs", json={"checkpoint": str(tmp_path / "models" / "tiny"), "tasks": [task]}).json()
        wait_for(lambda: recorded(settings.results, job["id"]) >= 2, 120, 0.01, "samples on disk")
        for pid in worker_pids(settings.results, job["id"]):
            os.kill(pid, signal.SIGKILL)
        done = wait_job(c, job["id"], timeout=150)
        # the unit whose worker died ran again on a fresh worker; the job itself was not requeued
        assert done["status"] == "succeeded" and done["attempts"] == 1, done
        work = json.loads((job_results(settings, job["id"])).read_text())["work"]
        assert work["unit_runs"] > work["units"], work
        assert any("memory suspected: runs again at decoding batch 4" in r for r in work["reruns"]), work
        notes = unit_notes(task_dir(settings, job["id"], "passkey"))
        assert sorted(n["max_batch"] for n in notes) == [4, 8], notes
        ids = [json.loads(x)["id"] for x in c.get(f"/v1/jobs/{job['id']}/samples").text.splitlines()]
        assert len(ids) == len(set(ids)) == done["progress"]["passkey"]["total"]

        doomed = c.post("/v1/jobs", json={"checkpoint": str(tmp_path / "models" / "tiny"),
                                          "tasks": [{**task, "seed": 5}]}).json()
        killed: set[int] = set()

        def kill_each_run() -> dict | None:
            for pid in worker_pids(settings.results, doomed["id"]) - killed:
                killed.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            state = c.get(f"/v1/jobs/{doomed['id']}").json()
            return state if state["status"] not in ("queued", "running") else None

        failed = wait_for(kill_each_run, 150, 0.01, "the job whose workers are always killed to fail")
        assert failed["status"] == "failed" and len(killed) == 2, (failed, killed)
        assert "out-of-memory killer" in failed["error"] and "decoding batches 8, 4" in failed["error"], failed
