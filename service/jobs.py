"""Runs one job: load the checkpoint once, run each task's evaluator, report progress,
write `results/<job>/results.json` atomically
(`evaluators.suite.run_suite`, the runner `lctx eval` uses too).

Every task gets its own folder `results/<job>/tasks/<key>/` where the evaluator appends
per-sample records (`samples.jsonl`) and writes plots; it skips samples already
recorded, so a job whose worker died resumes where it stopped. A file lock on the job
folder makes sure a worker of an earlier attempt that is still dying has stopped
writing before the next attempt reads the records."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from checkpoints.engine import Engine
from checkpoints.errors import CheckpointError
from checkpoints.jsonfiles import write_json_atomic
from checkpoints.loading import load_model
from evaluators.errors import EvaluationCancelled, EvaluatorError
from evaluators.suite import (
    RESULTS_FILE,
    TASK_RESULT,
    partial_result,
    run_suite,
    suite_document,
    task_folder,
    task_keys,
)
from service.errors import ServiceError
from service.progress import JobProgress
from service.settings import Settings
from service.status import FAILED, RUNNING, SUCCEEDED
from service.store import JobRow, Store
from service.submission import confine_checkpoint_files

log = logging.getLogger("lctx.jobs")

PROGRESS_EVERY_S = 0.5
STOP_CHECK_EVERY_S = 1.0


class Stopped(Exception):
    """The job was cancelled (or taken back) while it ran."""


def job_dir(settings: Settings, job_id: str) -> Path:
    return settings.results / job_id


def task_dir(settings: Settings, job_id: str, key: str) -> Path:
    return task_folder(job_dir(settings, job_id) / "tasks", key)


def pick_device(setting: str) -> str:
    if setting != "auto":
        return setting
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _stopper(store: Store, job_id: str) -> Callable[[], bool]:
    last, stopped = [0.0], [False]

    def should_stop() -> bool:
        if not stopped[0] and time.monotonic() - last[0] >= STOP_CHECK_EVERY_S:
            last[0] = time.monotonic()
            stopped[0] = store.get_job(job_id).status != RUNNING
        return stopped[0]

    return should_stop


def run_job(settings: Settings, job_id: str, store: Store | None = None) -> str:
    """Run a claimed (running) job to its end; returns the status it ended in. Evaluator
    and checkpoint errors fail the job with their message; nothing escapes but a dying
    process."""
    own_store = store is None
    store = store or Store(settings.database)
    out = job_dir(settings, job_id)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(out / ".lock")):
            job = store.get_job(job_id)
            if job.status != RUNNING:
                return job.status
            (out / "worker.json").write_text(json.dumps(
                {"pid": os.getpid(), "host": socket.gethostname(), "attempt": job.attempts}))
            try:
                _run(settings, store, job, out)
            except (Stopped, EvaluationCancelled):
                return store.get_job(job_id).status
            except (EvaluatorError, CheckpointError, ServiceError, ValueError) as e:
                log.warning("job %s failed: %s", job_id, e)
                store.finish(job_id, FAILED, str(e))
                return FAILED
            except Exception as e:  # a bug in an evaluator must fail its job, not the service
                log.exception("job %s failed with an unexpected error", job_id)
                store.finish(job_id, FAILED, f"unexpected error: {type(e).__name__}: {e}")
                return FAILED
            return SUCCEEDED if store.finish(job_id, SUCCEEDED) else store.get_job(job_id).status
    finally:
        if own_store:
            store.close()


def _run(settings: Settings, store: Store, job: JobRow, out: Path) -> None:
    started = (job.started_at.replace(tzinfo=UTC) if job.started_at else datetime.now(UTC)).isoformat()
    if job.endpoint:
        loaded, engine, source = _served(settings, store, job)
    else:
        confine_checkpoint_files(Path(job.checkpoint_path), settings.roots)  # a file swapped for a link since submission
        loaded = load_model(job.checkpoint_path, rope=job.rope, backend=job.backend,
                            device=pick_device(settings.device))
        budget = settings.engine_memory_mb << 20 if settings.engine_memory_mb else None
        engine = Engine(loaded.model, loaded.tokenizer, memory_budget=budget, max_batch=settings.engine_max_batch,
                        prefix_cache=settings.engine_prefix_cache)
        source = {"checkpoint": {"name": job.checkpoint, "path": job.checkpoint_path, "fingerprint": job.fingerprint}}
    progress = JobProgress(lambda state: store.set_progress(job.id, state),
                           dict(zip(task_keys(job.tasks), job.tasks, strict=True)), job.progress, PROGRESS_EVERY_S)
    should_stop = _stopper(store, job.id)
    plots: list[dict[str, str]] = []

    def after_task(key: str, folder: Path) -> None:
        progress.close()  # the task's last state
        if should_stop():
            raise Stopped
        plots.extend({"task": key, "name": p.stem, "url": f"/v1/jobs/{job.id}/plots/{p.name}"}
                     for p in sorted((folder / "plots").glob("*.png")))

    results = run_suite(loaded, job.tasks, out / "tasks", engine, data_dir=settings.data_dir,
                        progress=progress.samples, should_stop=should_stop, after_task=after_task,
                        on_prefill=progress.prefilled)
    write_json_atomic(out / RESULTS_FILE, suite_document(
        loaded, job.tasks, results, started, job=job.id, **source, plots=plots, attempts=job.attempts))


def _served(settings: Settings, store: Store, job: JobRow) -> tuple[Any, Any, dict[str, Any]]:
    """The job's endpoint as a model evaluators run on: URL checked again against today's
    allowed hosts, the server probed again (it may have been redeployed), its engine."""
    from checkpoints.endpoint import EndpointEngine, connect
    from service.submission import endpoint_spec

    row = store.get_endpoint(job.endpoint)
    served = connect(endpoint_spec(row), settings.endpoint_host_list)
    return served, EndpointEngine(served), {"endpoint": {"name": row.name, "url": row.base_url,
                                                         "served_model": row.served_model}}


def partial_results(settings: Settings, job: JobRow) -> dict[str, Any]:
    """The results of a job that failed or was cancelled: each finished task's entry, and
    for the others what their recorded samples add up to (nothing is lost)."""
    results: dict[str, Any] = {}
    for key, task in zip(task_keys(job.tasks), job.tasks, strict=True):
        folder = task_dir(settings, job.id, key)
        done = folder / TASK_RESULT
        if done.is_file():
            results[key] = json.loads(done.read_text())
            continue
        try:
            results[key] = partial_result(task, folder)
        except (EvaluatorError, ValueError, OSError) as e:
            results[key] = {"task": task.get("name"), "partial": True, "error": f"cannot aggregate: {e}"}
    return {
        "job": job.id,
        "partial": True,
        "status": job.status,
        "error": job.error,
        "checkpoint": {"name": job.checkpoint, "path": job.checkpoint_path, "fingerprint": job.fingerprint},
        "tasks": job.tasks,
        "results": results,
        "attempts": job.attempts,
    }
