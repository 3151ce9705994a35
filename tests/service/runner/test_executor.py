"""The executor's sizing without starting Ray: jobs running at once and workers per job
come from the settings when set (the retry policy of dead workers is per work unit:
tests/service/runner/test_runner_scale_out.py)."""

from __future__ import annotations

from pathlib import Path

from service.runner.executor import Executor
from service.store import Store
from tests.helpers import make_settings


def test_capacity_and_workers_per_job_follow_the_settings(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_running_jobs=3, job_workers=4)
    store = Store(settings.database)
    store.create_all()
    job = store.add_job(checkpoint="c", checkpoint_path="/m/c", fingerprint="f" * 64, tasks=[{"name": "passkey"}],
                        rope=None, backend="auto", priority=0)
    executor = Executor(settings, store)
    assert executor.capacity() == 3 and executor.workers(job) == 4
    store.close()
