"""A service in its first seconds (issue #60, finding 11): bad input is answered 4xx before
anything waits for the cluster, and a valid job submitted before the dispatcher has reported the
cluster's resources is queued, not turned away with 503; it is checked against the resources
when the executor claims it, and fails then with the reason if the cluster cannot run it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api import deps
from service.app import create_app
from service.core.status import FAILED, QUEUED
from service.runner.coordinator import JobRun
from service.runner.supervisor import DispatcherSupervisor
from tests.helpers import make_settings, tiny_checkpoint

PASSKEY = {"name": "passkey", "lengths": [64], "trials": 1}


@pytest.fixture
def starting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The API of a server whose dispatcher has not reported the cluster yet (it never will here)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # no interpreter stands in for a GPU
    monkeypatch.setattr(deps, "CLUSTER_WAIT_S", 0.2)
    tiny_checkpoint(tmp_path / "models" / "tiny")
    settings = make_settings(tmp_path)
    app = create_app(settings)
    with TestClient(app) as c:
        app.state.dispatcher = DispatcherSupervisor(settings, app.state.store)  # not started: no report yet
        assert c.post("/v1/checkpoints", json={"name": "tiny", "path": "tiny"}).status_code == 201
        yield c, app


def test_bad_input_is_refused_before_the_cluster_is_waited_for(starting) -> None:
    c, _ = starting
    t = time.monotonic()
    r = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [PASSKEY], "rope": "yarn:nan"})
    assert r.status_code == 422 and "finite" in r.text, r.text
    assert time.monotonic() - t < deps.CLUSTER_WAIT_S + 5


def test_a_valid_job_is_queued_then_checked_against_the_cluster_when_claimed(starting) -> None:
    c, app = starting
    ok = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [PASSKEY]})
    assert ok.status_code == 202 and ok.json()["status"] == QUEUED, ok.text
    triton = c.post("/v1/jobs", json={"checkpoint": "tiny", "tasks": [PASSKEY], "backend": "triton"})
    assert triton.status_code == 202, triton.text  # the cluster's GPUs are not known yet
    store, settings = app.state.store, app.state.settings
    store.cancel(ok.json()["id"])
    job = store.claim_next("test-replica")
    assert job is not None and job.id == triton.json()["id"]
    spawned: list[int] = []
    run = JobRun(settings, store, job, lambda: spawned.append(1), 1, cluster_gpus=0)  # the cluster: no GPU
    assert run.run() == FAILED and not spawned
    error = store.get_job(job.id).error or ""
    assert "needs a CUDA GPU" in error and "the Ray cluster has no GPU" in error, error
