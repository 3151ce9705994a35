"""Where a job's files live under the service's results folder (LCTX_HOME/results): the one
declaration the worker, the coordinator, the routers and the tests read.

    <results>/<job id>/results.json              the job's document (evaluators.suite.RESULTS_FILE)
    <results>/<job id>/tasks/<task key>/         one task: samples.jsonl, units/, result.json, plots/"""

from __future__ import annotations

from pathlib import Path

from evaluators.suite import RESULTS_FILE, TASK_RESULT, task_folder
from service.core.settings import Settings

TASKS_DIR = "tasks"
PLOTS_DIR = "plots"  # beside a task's samples (evaluators.run writes its plots there)

__all__ = ["PLOTS_DIR", "RESULTS_FILE", "TASKS_DIR", "TASK_RESULT", "job_dir", "job_path", "job_results", "task_dir",
           "task_path", "task_plots", "task_result_path"]


def job_path(results: Path, job_id: str) -> Path:
    """A job's folder under a results folder (a service's or a cluster node's view of it)."""
    return results / job_id


def task_path(results: Path, job_id: str, key: str) -> Path:
    return task_folder(job_path(results, job_id) / TASKS_DIR, key)


def job_dir(settings: Settings, job_id: str) -> Path:
    return job_path(settings.results, job_id)


def job_results(settings: Settings, job_id: str) -> Path:
    """The job's results document."""
    return job_dir(settings, job_id) / RESULTS_FILE


def task_dir(settings: Settings, job_id: str, key: str) -> Path:
    return task_path(settings.results, job_id, key)


def task_result_path(settings: Settings, job_id: str, key: str) -> Path:
    """A finished task's entry (its part of the job's document, kept if a later task fails)."""
    return task_dir(settings, job_id, key) / TASK_RESULT


def task_plots(settings: Settings, job_id: str, key: str) -> Path:
    return task_dir(settings, job_id, key) / PLOTS_DIR
