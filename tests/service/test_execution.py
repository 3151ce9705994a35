"""The executor's retry policy for dead workers, without starting Ray: a worker that
died is retried until `max_attempts` runs, then the job fails saying why."""

from __future__ import annotations

from pathlib import Path

from ray.exceptions import WorkerCrashedError

from service.execution import Executor
from service.status import FAILED, QUEUED
from service.store import Store
from tests.helpers import make_settings


def test_dead_worker_is_retried_then_failed(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_attempts=2, max_running_jobs=3)
    store = Store(settings.database)
    store.create_all()
    job = store.add_job(checkpoint="c", checkpoint_path="/m/c", fingerprint="f" * 64, tasks=[{"name": "passkey"}],
                        rope=None, backend="auto", priority=0)
    executor = Executor(settings, store)
    assert executor.capacity() == 3
    store.claim_next(executor.owner)
    assert executor._worker_died(job.id, WorkerCrashedError()) == QUEUED
    requeued = store.get_job(job.id)
    assert requeued.status == QUEUED and "worker died" in requeued.error
    assert store.claim_next(executor.owner).attempts == 2
    assert executor._worker_died(job.id, WorkerCrashedError()) == FAILED
    failed = store.get_job(job.id)
    assert failed.status == FAILED and "after 2 attempts" in failed.error
    assert executor._worker_died(job.id, WorkerCrashedError()) == FAILED
    store.close()
