"""One server per home (#27): a second `lctx serve` on the same home, or on the same SQLite
database from another home, exits at once with a message naming the running server, and
touches nothing: the first server's running job is not requeued and finishes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from service.core.status import RUNNING, SUCCEEDED
from service.store import Store
from tests.helpers import free_port, ready, recorded, tiny_checkpoint, wait_for, wait_job

pytestmark = pytest.mark.integration  # `lctx serve` and Ray


def serve(tmp: Path, home: Path, port: int, ray_address: str, **env: str) -> subprocess.Popen:
    env = dict(os.environ, LCTX_HOME=str(home), LCTX_CHECKPOINT_ROOTS=str(tmp / "models"),
               LCTX_RAY_ADDRESS=ray_address, LCTX_SCHEDULER="false", LCTX_POLL_INTERVAL="0.1", **env)
    env.pop("LCTX_REPLICA_ID", None)  # the default id: <host>-<hash of the home>
    return subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning"], cwd=tmp, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)




@pytest.mark.timeout(150)
def test_a_second_server_on_the_same_home_or_database_is_refused(ray_cluster: str, tmp_path: Path) -> None:
    tiny_checkpoint(tmp_path / "models" / "tiny")
    home = tmp_path / "var"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = serve(tmp_path, home, port, ray_cluster)
    try:
        wait_for(lambda: ready(url) or first.poll() is not None, 90, 0.2, "first server ready")
        assert first.poll() is None
        with httpx.Client(base_url=url, timeout=30) as c:
            assert c.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
            job = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [
                {"name": "passkey", "lengths": [512], "trials": 64, "seed": 5}]}).json()
            wait_for(lambda: recorded(home / "results", job["id"]) >= 1, 120, 0.01, "samples on disk")

            second_port = free_port()
            for second_home in (home, tmp_path / "other"):  # the same home; another home, the same database
                extra = {} if second_home == home else {"LCTX_DATABASE_URL": f"sqlite:///{home / 'lctx.db'}"}
                second = serve(tmp_path, second_home, second_port, ray_cluster, **extra)
                out, _ = second.communicate(timeout=30)
                assert second.returncode == 1, out
                assert f"pid {first.pid}, {url}" in out and "Traceback" not in out, out
                where = (f"on this home ({home})" if second_home == home
                         else f"on this database ({home / 'lctx.db'})")
                assert f"lctx: error: another lctx server is running {where}" in out, out
                assert ("LCTX_HOME" if second_home == home else "LCTX_DATABASE_URL") in out
                assert not ready(f"http://127.0.0.1:{second_port}")

            store = Store(f"sqlite:///{home / 'lctx.db'}")
            row = store.get_job(job["id"])
            store.close()
            # not requeued by the refused servers (it may have finished meanwhile: two workers share it)
            assert row.status in (RUNNING, SUCCEEDED) and row.attempts == 1
            done = wait_job(c, job["id"], timeout=120)
            assert done["status"] == "succeeded" and done["attempts"] == 1, done
    finally:
        first.terminate()
        first.wait(60)
