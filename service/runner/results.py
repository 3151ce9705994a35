"""The files a job's coordinator writes as its work comes back (a finished task's entry and
plots, the job's results.json) and the results of a job that did not finish. Workers send
what they computed; only the coordinator writes here (service/core/layout.py says where)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.errors import EvaluatorError
from evaluators.samplelog import SAMPLES_FILE
from evaluators.suite import partial_result, suite_document, task_keys
from service.core.layout import job_results, task_dir, task_plots, task_result_path
from service.core.settings import Settings
from service.store import JobRow

if TYPE_CHECKING:
    from service.runner.calls import TaskFinished


def keep_task(settings: Settings, job_id: str, key: str, answer: TaskFinished) -> dict[str, Any]:
    """A finished task as a worker sent it (`Worker.finish_task`: its entry and plot files):
    the plots written to the task's plots folder (each a file name, never a path), the entry's
    paths made this service's, the entry saved as the task's result.json (kept if a later task
    fails); returns the entry."""
    plots = task_plots(settings, job_id, key)
    paths = []
    for name, data in sorted(answer.plots.items()):
        if Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"task {key}: a worker sent a plot named {name!r}, not a file name")
        plots.mkdir(parents=True, exist_ok=True)
        (plots / name).write_bytes(data)
        paths.append(str(plots / name))
    entry = {**answer.entry, "samples_file": str(task_dir(settings, job_id, key) / SAMPLES_FILE), "plots": paths}
    write_json_atomic(task_result_path(settings, job_id, key), entry)
    return entry


def write_results(settings: Settings, job: JobRow, model: dict[str, Any], results: dict[str, Any],
                  source: dict[str, Any], work: dict[str, Any]) -> None:
    """The job's results.json: the model as it ran, each task's entry, its plots (every task
    folder's, each named by its task key and file: the API answers their URLs), the attempts it
    took and how its work was spread (`work`: workers, units, unit runs, re-runs)."""
    plots = [{"task": key, "name": p.stem}  # the file <name>.png of the task's plots folder
             for key in task_keys(job.tasks) for p in sorted(task_plots(settings, job.id, key).glob("*.png"))]
    started = (job.started_at.replace(tzinfo=UTC) if job.started_at else datetime.now(UTC)).isoformat()
    write_json_atomic(job_results(settings, job.id), suite_document(
        model, job.tasks, results, started, job=job.id, **source, plots=plots, attempts=job.attempts, work=work))


def partial_results(settings: Settings, job: JobRow) -> dict[str, Any]:
    """The results of a job that failed or was cancelled: each finished task's entry, and
    for the others what their recorded samples add up to (nothing is lost)."""
    results: dict[str, Any] = {}
    for key, task in zip(task_keys(job.tasks), job.tasks, strict=True):
        folder = task_dir(settings, job.id, key)
        done = task_result_path(settings, job.id, key)
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
