"""The API knows the cluster's resources from its first request (issue #40 item 3, issue #60
finding 11): right after a server starts, its dispatcher (a process of its own) is still joining
Ray; a submission whose checks depend on the cluster (here `backend: triton` on a cluster without
GPUs) waits a while for the dispatcher's first report and is refused as it would be later, or,
the cluster still not reported, is queued and fails when claimed with the same reason: never a
503, never a job that runs where it cannot."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.app import create_app
from tests.helpers import ThreadServer, make_settings, tiny_checkpoint, wait_job

pytestmark = pytest.mark.integration  # a server on loopback and Ray


def test_the_first_request_after_start_is_checked_against_the_cluster(ray_cluster: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the API's check: no interpreter stands in for a GPU
    tiny_checkpoint(tmp_path / "models" / "tiny")
    settings = make_settings(tmp_path, executor=True, ray_address=ray_cluster, replica_id="first-request")
    job = {"checkpoint": "tiny", "tasks": [{"name": "passkey", "lengths": [128], "trials": 1}], "backend": "triton"}
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        r = c.post("/v1/jobs", json={**job, "checkpoint": str(tmp_path / "models" / "tiny")})  # at once
        if r.status_code == 202:  # the dispatcher had not reported yet: checked when claimed
            done = wait_job(c, r.json()["id"])
            assert done["status"] == "failed" and "needs a CUDA GPU" in (done["error"] or ""), done
        else:
            assert r.status_code == 422 and "needs a CUDA GPU" in r.text, r.text
