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

from tests.service.helpers import free_port, wait_for


@pytest.mark.timeout(180)
def test_serve_joins_the_ray_of_RAY_ADDRESS_even_with_num_cpus_set(ray_cluster: str, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LCTX_")}
    env.update(RAY_ADDRESS=ray_cluster, LCTX_RAY_NUM_CPUS="1", LCTX_HOME=str(tmp_path / "var"),
               LCTX_CHECKPOINT_ROOTS=str(tmp_path / "models"), LCTX_SCHEDULER="false", LCTX_DEMO_CHECKPOINTS="false")
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
        return r if r is not None and (r.status_code != 503 or "connecting" not in r.text) else None

    try:
        r = wait_for(settled, 120, 0.2, "service to answer /readyz")
        assert r.status_code == 200, (r.text, log.read_text()[-3000:])
    finally:
        proc.terminate()
        proc.wait(60)
