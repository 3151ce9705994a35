"""The API knows the cluster's resources from its first request (issue #40 item 3): right
after a server starts, its dispatcher (a process of its own) is still joining Ray; a
submission whose checks depend on the cluster (here `backend: triton` on a cluster without
GPUs) waits for the dispatcher's first report, or answers 503 with Retry-After, and is then
refused as it would be later: never a 202 that fails when it runs."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.app import create_app
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint

pytestmark = pytest.mark.integration  # a server on loopback and Ray


def test_the_first_request_after_start_is_checked_against_the_cluster(ray_cluster: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the API's check: no interpreter stands in for a GPU
    tiny_checkpoint(tmp_path / "models" / "tiny")
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="first-request")
    job = {"checkpoint": "tiny", "tasks": [{"name": "passkey", "lengths": [128], "trials": 1}], "backend": "triton"}
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        statuses = []
        r = c.post("/v1/jobs", json={**job, "checkpoint": str(tmp_path / "models" / "tiny")})  # at once
        statuses.append(r.status_code)
        while r.status_code == 503:
            assert r.headers["retry-after"] and "retry" in r.json()["detail"], r.text
            r = c.post("/v1/jobs", json={**job, "checkpoint": str(tmp_path / "models" / "tiny")})
            statuses.append(r.status_code)
        assert r.status_code == 422 and "needs a CUDA GPU" in r.text, (statuses, r.text)
        assert 202 not in statuses
