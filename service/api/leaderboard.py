"""/v1/leaderboard?task=...: for one task, a row per checkpoint and setting (RoPE
setting, backend, the task options that change scores) with its latest results, side by
side; /v1/compare: two or more jobs on one task with per-column differences.

Columns come from the task's typed result (`evaluators.results`): each metric by name
and each series point as `<series>.<axis>=<key>` (e.g. `accuracy.length=1024`, the
per-length columns); `task=<task>/<key>` shows the series points at one key (e.g.
`longbench/qasper`: the score of qasper). Each column says whether higher is better;
rows are sorted by the task's headline metric, best first. Results written before the
typed contract are read through their evaluator's `legacy_result`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from evaluators.registry import registry, unknown_task
from service.api.deps import Read, SettingsDep, StoreDep
from service.comparison import Scored, column_info, column_order, headline_column, scored
from service.errors import Conflict, NotFound
from service.schemas import (
    JOB_ID_PATTERN,
    NO_NUL_PATTERN,
    TASK_PATTERN,
    Comparison,
    ComparisonRow,
    Leaderboard,
    LeaderboardRow,
    errors,
)
from service.status import SUCCEEDED

router = APIRouter(tags=["leaderboard"])
Filter = Annotated[str | None, Query(max_length=4096, pattern=NO_NUL_PATTERN)]


def _row(entry: Scored, names: list[str]) -> dict:
    job = entry.job
    context = entry.context or {}
    return dict(checkpoint=job.checkpoint, fingerprint=job.fingerprint, rope=entry.rope, backend=entry.backend,
                thinking=entry.thinking, data_revision=entry.data,
                options=entry.options, setting=entry.setting, job=job.id, finished_at=job.finished_at,
                trained_context=context.get("trained"), beyond_context=context.get("beyond", []),
                values={c: entry.values[c][0] if c in entry.values else None for c in names})


@router.get("/v1/leaderboard", dependencies=Read, response_model=Leaderboard, responses=errors(404))
def leaderboard(task: Annotated[str, Query(pattern=TASK_PATTERN, examples=["passkey"])],
                store: StoreDep, settings: SettingsDep, checkpoint: Filter = None,
                rope: Filter = None, backend: Filter = None, thinking: Filter = None) -> Leaderboard:
    """One row per (checkpoint, RoPE setting, backend, scoring options, data revision): its latest results.
    Filter by `checkpoint` (name), `rope` (label as shown, e.g. `yarn:4`), `backend` and
    `thinking` (a reasoning model's setting: the same checkpoint thinking and not, side by side)."""
    name = task.split("/")[0].split("#")[0]
    if name not in registry():  # an unknown task is not an empty table
        raise NotFound(unknown_task(name))
    entries: dict[tuple, Scored] = {}
    for job in store.latest_succeeded(task):  # newest first: the first job of a key is its row
        if checkpoint is not None and job.checkpoint != checkpoint:
            continue
        entry = scored(settings, job, task)
        if entry is None or entry.key in entries:
            continue  # results gone or unreadable: the next older job of this setting answers
        if (rope is not None and entry.rope != rope.strip().lower()) or (backend is not None and entry.backend != backend) \
                or (thinking is not None and entry.thinking != thinking):
            continue
        entries[entry.key] = entry
    columns = column_info(list(entries.values()))
    names = column_order(columns)
    rows = [LeaderboardRow(**_row(e, names)) for e in entries.values()]
    headline = headline_column(next(iter(entries.values())), task) if entries else None
    better = columns[headline].higher_is_better if headline in columns else None
    if better is not None:
        rows.sort(key=lambda r: (r.values[headline] is None, -(r.values[headline] or 0) if better
                                 else (r.values[headline] or 0), r.checkpoint, r.setting))
    return Leaderboard(task=task, columns=names, headline=headline if better is not None else None,
                       column_info=[columns[c] for c in names], rows=rows)


@router.get("/v1/compare", dependencies=Read, response_model=Comparison,
            responses=errors(404, 409))
def compare(task: Annotated[str, Query(pattern=TASK_PATTERN, examples=["passkey"])],
            jobs: Annotated[list[Annotated[str, Query(pattern=JOB_ID_PATTERN)]],
                            Query(min_length=2, max_length=32, description="job ids; the first is the baseline")],
            store: StoreDep, settings: SettingsDep) -> Comparison:
    """Two or more jobs (settings, checkpoints) on one task: every column of each, and its
    difference from the first job's (per length for tasks with a length series)."""
    entries = []
    for job_id in jobs:
        job = store.get_job(job_id)
        if job.status != SUCCEEDED:
            raise Conflict(f"job {job_id} is {job.status}; compare succeeded jobs")
        entry = scored(settings, job, task)
        if entry is None:
            raise Conflict(f"job {job_id} has no results for task {task!r}; its tasks: "
                                 f"{', '.join(t.get('name', '?') for t in job.tasks)}")
        entries.append(entry)
    columns = column_info(entries)
    names = column_order(columns)
    base = entries[0].values
    rows = []
    for e in entries:
        row = _row(e, names)
        diff = {}
        for c in names:
            v, b = row["values"][c], base.get(c, (None, None))[0]
            diff[c] = None if v is None or b is None else v - b
        rows.append(ComparisonRow(**row, difference=diff))
    return Comparison(task=task, baseline=entries[0].job.id, columns=names,
                      column_info=[columns[c] for c in names], rows=rows)
