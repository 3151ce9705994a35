"""How the service finds Ray: in the container the entrypoint starts a Ray head and
sets RAY_ADDRESS; the service must join it even when LCTX_RAY_NUM_CPUS (meant for a
local Ray it starts itself) is set, since Ray refuses num_cpus for a cluster it joins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import free_port, wait_for

pytestmark = pytest.mark.integration  # `lctx serve` and Ray


@pytest.mark.timeout(180)
def test_serve_joins_the_ray_of_RAY_ADDRESS_even_with_num_cpus_set(ray_cluster: str, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LCTX_")}
    env.update(RAY_ADDRESS=ray_cluster, LCTX_RAY_NUM_CPUS="1", LCTX_HOME=str(tmp_path / "var"),
               LCTX_CHECKPOINT_ROOTS=str(tmp_path / "models"), LCTX_SCHEDULER="false", LCTX_DEMO_CHECKPOINTS="false",
               LCTX_DEMO_REAL_MODEL="false")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port),
                                 "--log-level", "warning"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def answered() -> httpx.Response | None:
        try:
            return httpx.get(f"{url}/readyz", timeout=2)
        except httpx.HTTPError:
            return None if proc.poll() is None else httpx.Response(599)

    def settled() -> httpx.Response | None:
        r = answered()
        starting = r is not None and r.status_code == 503 and "exited" not in r.text and (
            "starting" in r.text or "connecting" in r.text)  # not yet joined; a Ray error shows as an exit
        return r if r is not None and not starting else None

    try:
        r = wait_for(settled, 120, 0.2, "service to answer /readyz")
        assert r.status_code == 200, (r.text, log.read_text()[-3000:])
    finally:
        proc.terminate()
        proc.wait(60)


LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def listening(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket and bound UDP socket of `pids`."""
    import psutil

    return [(c.pid, c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
            if c.pid in pids and c.laddr and (c.status == psutil.CONN_LISTEN or c.type == 2)]


@pytest.mark.timeout(240)
def test_default_mode_listens_on_loopback_only_and_keeps_ray_files_in_home(tmp_path: Path) -> None:
    """`lctx serve` with nothing configured: the API and the embedded Ray (GCS, raylet,
    object manager, a worker that ran a job) listen on loopback only; Ray writes nothing
    to ~/.ray; SIGTERM ends the service without a traceback."""
    import tempfile

    import psutil

    home = Path(tempfile.mkdtemp(prefix="lx", dir="/tmp"))  # short: Ray's socket paths have a length limit
    user_home = tmp_path / "user"
    user_home.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LCTX_", "RAY_"))}
    env.update(HOME=str(user_home), LCTX_HOME=str(home), LCTX_RAY_NUM_CPUS="1", LCTX_SCHEDULER="false",
               LCTX_PORT=str(port), LCTX_DEMO_REAL_MODEL="false")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--log-level", "warning"],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            assert proc.poll() is None, log.read_text()[-3000:]
            return False

    try:
        wait_for(ready, 150, 0.3, "service ready")
        job = httpx.post(f"{url}/v1/jobs", json={"checkpoint": "demo-softmax",
                                                 "tasks": [{"name": "passkey", "lengths": [64], "trials": 1}]})
        assert job.status_code == 202, job.text
        wait_for(lambda: httpx.get(f"{url}/v1/jobs/{job.json()['id']}").json()["status"] == "succeeded", 120, 0.5,
                 "job to succeed")
        tree = {proc.pid} | {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        sockets = listening(tree)
        assert any(p == port for _, _, p in sockets), sockets  # the API itself is in the list
        assert len({pid for pid, _, _ in sockets}) >= 3, sockets  # and Ray's processes (gcs, raylet, ...)
        outside = [s for s in sockets if s[1] not in LOOPBACK]
        assert not outside, f"listening outside loopback: {outside}"
        assert not (user_home / ".ray").exists() and (home / "ray").is_dir()
    finally:
        proc.terminate()
        proc.wait(60)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
