"""The API never dies with Ray (#27): jobs are dispatched from a process of their own. A
real `lctx serve`: kill -9 its dispatcher mid-job; the API keeps answering (/healthz 200
throughout, /readyz 503 naming the restart, then 200), a new dispatcher starts, requeues
the job, and the job finishes with every sample recorded once. A submission wakes the
dispatcher at once (its own poll is set to 20 s here, so only the wake-up can start the
job quickly)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from service.runner.dispatcher import read_status
from tests.helpers import KILL_MID_UNIT_BATCH, free_port, recorded, tiny_checkpoint, wait_for, wait_job

pytestmark = pytest.mark.integration  # the dispatcher process and Ray


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


class Prober(threading.Thread):
    """/healthz and /readyz every 50 ms: every answer, and any failure to answer."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.health: list[int | str] = []
        self.ready: list[tuple[int, str]] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=5) as c:
            while not self.stop.is_set():
                try:
                    self.health.append(c.get("/healthz").status_code)
                    r = c.get("/readyz")
                    self.ready.append((r.status_code, r.json().get("detail", "")))
                except httpx.HTTPError as e:
                    self.health.append(f"{type(e).__name__}: {e}")
                time.sleep(0.05)


@pytest.mark.timeout(150)
def test_killed_dispatcher_restarts_while_the_api_answers_and_the_job_finishes(ray_cluster: str,
                                                                               tmp_path: Path) -> None:
    tiny_checkpoint(tmp_path / "models" / "tiny")
    home, port = tmp_path / "var", free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, LCTX_HOME=str(home), LCTX_CHECKPOINT_ROOTS=str(tmp_path / "models"),
               LCTX_RAY_ADDRESS=ray_cluster, LCTX_REPLICA_ID="dispatcher-test", LCTX_SCHEDULER="false",
               LCTX_POLL_INTERVAL="20", LCTX_ENGINE_MAX_BATCH=str(KILL_MID_UNIT_BATCH))
    log = tmp_path / "service.log"
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning"], cwd=tmp_path, env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    prober = Prober(url)
    try:
        def ready() -> bool:
            try:
                return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None

        wait_for(ready, 90, 0.2, "service ready")
        assert proc.poll() is None, log.read_text()
        first = read_status(home / "dispatcher.json")
        assert first["ready"] and first["gpus"] == 0 and parent_of(first["pid"]) == proc.pid
        with httpx.Client(base_url=url, timeout=30) as c:
            assert c.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
            submitted = time.monotonic()
            job = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [
                {"name": "passkey", "lengths": [512], "trials": 32, "seed": 6}]}).json()
            wait_for(lambda: c.get(f"/v1/jobs/{job['id']}").json()["status"] == "running", 15, 0.05, "job started")
            assert time.monotonic() - submitted < 10  # woken by the submission, not by its 20 s poll
            wait_for(lambda: recorded(home / "results", job["id"]) >= 2, 120, 0.01, "samples on disk")

            prober.start()
            wait_for(lambda: len(prober.ready) >= 3, 10, 0.05, "probes before the kill")
            os.kill(first["pid"], signal.SIGKILL)
            wait_for(lambda: any(code == 503 for code, _ in prober.ready), 10, 0.05, "/readyz 503")

            def restarted() -> bool:
                status = read_status(home / "dispatcher.json")
                return bool(status and status["pid"] != first["pid"] and status["ready"]
                            and prober.ready[-1][0] == 200)

            wait_for(restarted, 60, 0.1, "a new dispatcher, ready")
            second = read_status(home / "dispatcher.json")
            assert parent_of(second["pid"]) == proc.pid
            done = wait_job(c, job["id"], timeout=120)
            assert done["status"] == "succeeded" and done["attempts"] == 2, done
            ids = [json.loads(x)["id"] for x in c.get(f"/v1/jobs/{job['id']}/samples").text.splitlines()]
            assert len(ids) == len(set(ids)) == done["progress"]["passkey"]["total"]  # every sample once
        prober.stop.set()
        prober.join(10)
        assert prober.health and all(code == 200 for code in prober.health), prober.health
        refusals = [detail for code, detail in prober.ready if code == 503]
        assert refusals and all("dispatcher" in d for d in refusals), refusals
        assert any(f"pid {first['pid']} killed by SIGKILL" in d for d in refusals), refusals
        assert prober.ready[0][0] == 200 and prober.ready[-1][0] == 200
        assert f"dispatcher pid {first['pid']} killed by SIGKILL" in log.read_text()
    finally:
        prober.stop.set()
        proc.terminate()  # uvicorn stops gracefully, then re-raises SIGTERM: its exit status says nothing here
        proc.wait(60)
    assert "Traceback" not in log.read_text()
    stopped = read_status(home / "dispatcher.json")
    assert stopped["state"] == "stopped" and not Path(f"/proc/{stopped['pid']}").exists()  # stopped with the API
