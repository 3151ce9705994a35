from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from evaluators.registry import registry, unknown_task
from service import pairing
from service.api.deps import JobId, Read, SettingsDep, StoreDep
from service.comparison import column_order
from service.core.errors import Conflict, InvalidRequest, NotFound
from service.core.status import SUCCEEDED
from service.schemas import (
    JOB_ID_PATTERN,
    NO_NUL_PATTERN,
    TASK_PATTERN,
    ColumnDifference,
    Comparison,
    ComparisonRow,
    JobStanding,
    JobStandings,
    Leaderboard,
    LeaderboardColumn,
    LeaderboardRow,
    errors,
)
from service.store.results import NAME_SORTS, BoardQuery, Column, ResultRecord

router = APIRouter(tags=["leaderboard"])
Filter = Annotated[str | None, Query(max_length=4096, pattern=NO_NUL_PATTERN)]


def _row(rec: ResultRecord, names: list[str]) -> dict:
    return dict(checkpoint=rec.checkpoint, fingerprint=rec.fingerprint, rope=rec.rope, backend=rec.backend,
                thinking=rec.thinking, data_revision=rec.data_revision, options=rec.options, setting=rec.setting,
                job=rec.job_id, finished_at=rec.finished_at, trained_context=rec.trained_context,
                beyond_context=rec.beyond_context, values={c: rec.values.get(c) for c in names},
                errors={c: rec.errors.get(c) for c in names})


def _info(column: Column) -> LeaderboardColumn:
    return LeaderboardColumn(**vars(column))


def _known(task: str) -> None:
    name = task.split("/")[0].split("#")[0]
    if name not in registry():  # an unknown task is not an empty table
        raise NotFound(unknown_task(name))


@router.get("/v1/leaderboard", dependencies=Read, response_model=Leaderboard, responses=errors(404, 422))
def leaderboard(
    task: Annotated[str, Query(pattern=TASK_PATTERN, examples=["passkey"])],
    store: StoreDep,
    checkpoint: Filter = None,
    rope: Filter = None,
    backend: Filter = None,
    thinking: Filter = None,
    checkpoint_prefix: Annotated[str | None, Query(max_length=128, pattern=NO_NUL_PATTERN,
                                                   description="checkpoints whose name starts so, case-sensitive (one training run)")] = None,
    lineage: Annotated[str | None, Query(max_length=1024, pattern=NO_NUL_PATTERN,
                                         description="the folder the checkpoints lie in, as job paths show it "
                                                     "(a schedule's watch folder)")] = None,
    schedule: Annotated[str | None, Query(max_length=128, pattern=NO_NUL_PATTERN,
                                          description="jobs the schedule of this name submitted")] = None,
    finished_after: Annotated[datetime | None, Query(description="jobs finished at or after (UTC, ISO 8601)")] = None,
    finished_before: Annotated[datetime | None, Query(description="jobs finished before (UTC, ISO 8601)")] = None,
    per: Annotated[Literal["fingerprint", "lineage"], Query(
        description="a row per checkpoint (fingerprint) and setting, or per lineage (the checkpoint's folder) "
                    "and setting: that run's newest checkpoint")] = "fingerprint",
    sort: Annotated[str | None, Query(max_length=200, pattern=NO_NUL_PATTERN, description=(
        "a column's name, or checkpoint, setting, finished_at, job (default: the headline)"))] = None,
    order: Annotated[Literal["asc", "desc"] | None, Query(
        description="default: best first for a value column, newest first for finished_at, A to Z for names")] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Leaderboard:
    """One row per (checkpoint, RoPE setting, backend, scoring options, data revision): its latest results,
    a page at a time (`total`: the rows that match). Filter by `checkpoint` (name), `checkpoint_prefix`,
    `lineage`, `schedule`, `rope` (label as shown, e.g. `yarn:4`), `backend`, `thinking` (a reasoning
    model's setting: the same checkpoint thinking and not, side by side) and the finishing time.

    A page costs what it shows, not the history's size: each order (any column, a name, the time) and
    the lineage, schedule, RoPE and backend filters are index walks that stop at the page, and `total`
    is a kept count, except for a name prefix, a time range or several filters at once, whose `total`
    is counted up to 1,000 (`total_exact`). A lineage's curve over the nights is its rows sorted by
    `finished_at`: it costs the points asked for (`limit`), so a long lineage is read newest first a
    page at a time (the dashboard draws its newest 200 nights and says how many it has)."""
    _known(task)
    finished_after, finished_before = _naive(finished_after), _naive(finished_before)
    if finished_after and finished_before and finished_after >= finished_before:
        raise InvalidRequest("finished_after must be before finished_before; give a range that holds some time")
    q = BoardQuery(task=task, per=per, checkpoint=checkpoint, checkpoint_prefix=checkpoint_prefix, lineage=lineage,
                   schedule=schedule, rope=rope.strip().lower() if rope is not None else None, backend=backend,
                   thinking=thinking, finished_after=finished_after, finished_before=finished_before,
                   sort=sort, descending=None if order is None else order == "desc", limit=limit, offset=offset)
    page = store.board(q)
    if sort is not None and sort not in NAME_SORTS and sort not in page.columns and page.total:
        raise InvalidRequest(f"sort: {task} has no column {sort!r}; give one of its columns (the answer's `columns`) "
                             f"or {', '.join(NAME_SORTS)}")
    names = column_order({n: _info(c) for n, c in page.columns.items()})
    better = page.columns[page.headline].higher_is_better if page.headline in page.columns else None
    return Leaderboard(task=task, columns=names, headline=page.headline if better is not None else None,
                       column_info=[_info(page.columns[c]) for c in names], total=page.total,
                       total_exact=page.total_exact, limit=limit,
                       offset=offset, rows=[LeaderboardRow(**_row(r, names)) for r in page.rows])


def _naive(t: datetime | None) -> datetime | None:
    """UTC without a zone, as the store keeps times (service.store.models.now)."""
    if t is None or t.tzinfo is None:
        return t
    try:
        return t.astimezone(UTC).replace(tzinfo=None)
    except OverflowError as e:
        raise InvalidRequest(f"{t.isoformat()} is out of range in UTC; give a time between years 1 and 9999") from e


@router.get("/v1/compare", dependencies=Read, response_model=Comparison,
            responses=errors(404, 409))
def compare(task: Annotated[str, Query(pattern=TASK_PATTERN, examples=["passkey"])],
            jobs: Annotated[list[Annotated[str, Query(pattern=JOB_ID_PATTERN)]],
                            Query(min_length=2, max_length=32, description="job ids; the first is the baseline")],
            store: StoreDep, settings: SettingsDep) -> Comparison:
    """Two or more jobs (settings, checkpoints) on one task: every column of each, and its
    difference from the first job's (per length for tasks with a length series), each value
    with its error and each difference with its 95% interval: paired over the samples both
    jobs ran where they ran the same ones, else unpaired, as `pairing` says."""
    entries: list[ResultRecord] = []
    for job_id in jobs:
        job = store.get_job(job_id)
        if job.status != SUCCEEDED:
            raise Conflict(f"job {job_id} is {job.status}; compare succeeded jobs")
        entry = store.stored_result(job_id, task)
        if entry is None:
            raise Conflict(f"job {job_id} has no results for task {task!r}; its tasks: "
                           f"{', '.join(t.get('name', '?') for t in job.tasks)}")
        entries.append(entry)
    columns = {c.name: _info(c) for e in entries for c in e.columns}
    names = column_order(columns)
    base = entries[0].values
    loaded = [pairing.load(settings, store.get_job(e.job_id), task) for e in entries]
    rows = []
    for i, e in enumerate(entries):
        row = _row(e, names)
        diff = {}
        for c in names:
            v, b = row["values"][c], base.get(c)
            diff[c] = None if v is None or b is None else v - b
        errors = loaded[i].errors() if loaded[i] is not None else {}
        known, said = {}, "the baseline" if i == 0 else "no intervals: a job's results files are gone or unreadable"
        if i > 0 and loaded[0] is not None and loaded[i] is not None:
            found, said = pairing.differences(settings, loaded[0], loaded[i])
            known = {c: ColumnDifference(**d) for c, d in found.items() if c in names}
        rows.append(ComparisonRow(**row, difference=diff, error_bars={c: errors.get(c) for c in names},
                                  uncertainty=known, pairing=said))
    return Comparison(task=task, baseline=entries[0].job_id, columns=names,
                      column_info=[columns[c] for c in names], rows=rows)


@router.get("/v1/jobs/{job_id}/standings", dependencies=Read, response_model=JobStandings, responses=errors(404))
def job_standings(job_id: JobId, store: StoreDep) -> JobStandings:
    """What the job added to the leaderboard, as stored when it succeeded: per task key of its
    results the row the leaderboard and comparisons show (each column's value and meaning). The
    job page reads its numbers here; its results.json (`/results`) keeps what is not stored
    (summaries, samples per value, plots, data provenance). No rows: the job has not succeeded."""
    job = store.get_job(job_id)
    tasks = []
    for rec in store.job_standings(job.id):
        columns = {c.name: _info(c) for c in rec.columns}
        names = column_order(columns)
        tasks.append(JobStanding(task=rec.task, headline=rec.headline, columns=names,
                                 column_info=[columns[c] for c in names], row=LeaderboardRow(**_row(rec, names))))
    return JobStandings(job=job.id, tasks=tasks)
