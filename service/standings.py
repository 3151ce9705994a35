"""What a succeeded job adds to the leaderboard, stored once when it finishes: per task view
(`passkey`, and `longbench/qasper` for each point key and grid coordinate its series have)
its typed result's columns, its setting and context, as service/comparison.py reads them.
The leaderboard and comparisons then read rows (service/store/results.py), never results
files: a page costs what it shows, not the whole history.

`rows_of` is the coordinator's at a job's end: `Store.finish` writes the rows in the transaction
that marks the job succeeded (no succeeded job without its rows); `record_results` stores them
for a job already succeeded (tests, the bench); `read_batch` and `write_batch` are the data migration's
(service/upgrades.py): the same rows for jobs that ran before, a batch at a time (their
results.json read ahead in a thread, then written; a job whose results are gone is skipped and
logged)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from evaluators.registry import task_result
from service.comparison import Scored, column_info, headline_column, scored_in
from service.core.layout import job_results
from service.core.paths import client_path
from service.core.settings import Settings
from service.core.status import SUCCEEDED
from service.schemas import TASK_PATTERN
from service.store import JobRow, Store, TaskResultRow
from service.store.results import Column, ResultRecord, insert_results_many

log = logging.getLogger("lctx.standings")


def views(results: dict[str, Any]) -> list[str]:
    """The task views a results document answers: each task key, and `<key>/<select>` for each
    point key and grid coordinate of its series (the leaderboard's `task=longbench/qasper`)."""
    out: list[str] = []
    for key, entry in results.items():
        if not isinstance(entry, dict):
            continue
        out.append(key)
        try:
            result = task_result(entry)
        except Exception:  # unreadable: its whole view is skipped by scored_in as well
            continue
        selects = {str(p.key) for s in result.series for p in s.points} | \
            {str(v) for s in result.series for v in s.at.values()}
        out += [f"{key}/{s}" for s in sorted(selects) if f"{key}/{s}" not in results]
    return [v for v in out if re.fullmatch(TASK_PATTERN, v)]  # what the API can ask for


def _key(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def lineage(settings: Settings, job: JobRow) -> str | None:
    """The folder a checkpoint lies in as clients see it (a schedule's watch folder for nightly
    runs): one training run's checkpoints. None for a served model."""
    return None if job.endpoint else client_path(Path(job.checkpoint_path).parent, settings)


def record(settings: Settings, job: JobRow, view: str, entry: Scored, folder: Any = ...,
           keys: dict[tuple[Any, ...], tuple[str, str, str]] | None = None) -> ResultRecord:
    """The stored row of one scored view (`folder`: its lineage, when the caller has it; `keys`:
    the setting's options and keys made for the job's other views, as its setting repeats)."""
    columns = column_info([entry])
    headline = headline_column(entry, view)
    better = columns[headline].higher_is_better if headline in columns else None
    value = entry.values[headline][0] if headline in entry.values else None
    rank = None if value is None else -value if better is not False else value
    options_key = json.dumps(entry.options, sort_keys=True, default=str)
    folder = lineage(settings, job) if folder is ... else folder
    setting = (entry.rope, entry.backend, options_key, entry.data, folder)
    made = keys.get(setting) if keys is not None else None
    if made is None:
        made = (json.dumps(entry.options, default=str), _key(job.fingerprint, *setting[:4]),
                _key(folder or f"fingerprint:{job.fingerprint}", *setting[:4]))
        if keys is not None:
            keys[setting] = made
    context = entry.context or {}
    return ResultRecord(
        task=view, checkpoint=job.checkpoint, fingerprint=job.fingerprint, lineage=folder, schedule=job.schedule,
        rope=entry.rope, backend=entry.backend, thinking=entry.thinking, data_revision=entry.data,
        options=json.loads(made[0]), setting=entry.setting, setting_key=made[1], lineage_key=made[2],
        finished_at=job.finished_at, trained_context=context.get("trained"),
        beyond_context=list(context.get("beyond", [])), headline=headline, rank=rank,
        values={c: v for c, (v, _) in entry.values.items()}, errors={c: entry.errors.get(c) for c in entry.values},
        columns=[Column(**c.model_dump()) for c in columns.values()], job_id=job.id)


def records(settings: Settings, job: JobRow, results: dict[str, Any],
            folders: dict[str, str | None] | None = None) -> list[ResultRecord]:
    """Every view of a succeeded job's results that has values. A task's result is read once for
    all its views (`longbench/qasper` is the longbench entry's values at qasper); `folders` keeps
    the lineage of each checkpoint folder across the calls of a batch (the data migration's)."""
    parent = str(Path(job.checkpoint_path).parent)
    if folders is not None and parent in folders and not job.endpoint:
        folder = folders[parent]
    else:
        folder = lineage(settings, job)
        if folders is not None and not job.endpoint:
            folders[parent] = folder
    whole: dict[str, Scored | None] = {}
    keys: dict[tuple[Any, ...], tuple[str, str, str]] = {}
    out = []
    for view in views(results):
        key, _, select = view.partition("/")
        if view in results or not select:
            entry = whole[view] = scored_in(settings, job, view, results)
        else:
            if key not in whole:
                whole[key] = scored_in(settings, job, key, results)
            base = whole[key]
            values = base.result.columns(select) if base is not None else None
            entry = replace(base, values=values) if base is not None and values else \
                None if base is not None else scored_in(settings, job, view, results)
        if entry is not None:
            out.append(record(settings, job, view, entry, folder, keys))
    return out


def record_results(settings: Settings, store: Store, job_id: str, results: dict[str, Any]) -> None:
    """Store what a succeeded job adds to the leaderboard (its results document's `results`).
    A failure is logged, not raised: the job has succeeded and its results.json stands."""
    try:
        job = store.get_job(job_id)
        if job.status == SUCCEEDED:
            store.save_results(job_id, rows_of(settings, results)(job))
    except Exception:
        log.exception("job %s: its results could not be stored for the leaderboard", job_id)


def rows_of(settings: Settings, results: dict[str, Any]) -> Callable[[JobRow], list[ResultRecord]]:
    """What `Store.finish` stores with a succeeded job, in the same transaction (the coordinator's
    way): its rows from the finished row. A failure to make them is logged, not raised: the job
    has succeeded and its results.json stands (the rows are then missing, as the log says)."""
    def make(job: JobRow) -> list[ResultRecord]:
        try:
            return records(settings, job, results)
        except Exception:
            log.exception("job %s: its results could not be stored for the leaderboard", job.id)
            return []
    return make


def record_results_many(settings: Settings, store: Store, jobs: list[tuple[str, dict[str, Any]]]) -> None:
    """`record_results` of many succeeded jobs (job id, its results document's `results`) in one
    transaction, the same rows (Store.save_results_many): a history seeded at once (the bench).
    Unlike the coordinator's call it raises: a batch is all or nothing."""
    found = {j.id: j for j in store.get_jobs([job_id for job_id, _ in jobs])}
    batch = []
    for job_id, results in jobs:
        job = found.get(job_id)
        if job is not None and job.status == SUCCEEDED:
            batch.append((job_id, records(settings, job, results)))
    store.save_results_many(batch)


def read_batch(settings: Settings, jobs: list[JobRow]) -> list[tuple[str, list[ResultRecord]]]:
    """The rows of a batch of succeeded jobs already run (oldest first), from their results.json:
    the data migration 0007 asks for (service/upgrades.py), read with no database at hand (a
    thread reads the next batch while the one before is written). A job whose results are gone
    or unreadable is skipped and logged."""
    folders: dict[str, str | None] = {}
    batch = []
    for job in jobs:
        path = job_results(settings, job.id)
        try:
            results = json.loads(path.read_bytes())["results"]
            rows = records(settings, job, results, folders) if isinstance(results, dict) else []
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("job %s: no leaderboard rows from %s: %s", job.id, path, e)
            continue
        batch.append((job.id, rows))
    return batch


def write_batch(conn: Connection, batch: list[tuple[str, list[ResultRecord]]]) -> int:
    """`read_batch`'s rows in one write (`insert_results_many`), in the caller's transaction; a
    job that has rows already is left as it is. Returns the jobs given rows."""
    ids = [job_id for job_id, _ in batch]
    have: set[str] = set()
    for i in range(0, len(ids), 500):
        have |= set(conn.execute(select(TaskResultRow.job_id).where(TaskResultRow.job_id.in_(ids[i:i + 500]))
                                 .distinct()).scalars())
    batch = [(job_id, rows) for job_id, rows in batch if job_id not in have]
    insert_results_many(conn, batch)
    return len(batch)


def fill_batch(conn: Connection, settings: Settings, jobs: list[JobRow]) -> int:
    """The rows of a batch of succeeded jobs already run, read and written in one go
    (`read_batch`, then `write_batch`). Returns the jobs given rows."""
    return write_batch(conn, read_batch(settings, jobs))
