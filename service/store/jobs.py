"""Jobs: submission, the queue, claims, heartbeats, finishing, recovery. Methods return detached rows."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from service.core.errors import Conflict, Missing
from service.core.status import CANCELLED, FAILED, FINAL, QUEUED, RUNNING, SUCCEEDED, JobStatus
from service.store.db import Database, retried
from service.store.models import JobCountRow, JobRow, JobTaskCountRow, JobTaskRow, SubmissionRow, now
from service.store.results import ResultRecord, insert_results


def new_job_id() -> str:
    """A job's id: 16 hex digits."""
    return uuid.uuid4().hex[:16]


def samples_done(progress: dict[str, Any] | None) -> int:
    """Samples a job's progress says were scored, over its tasks."""
    return sum(int(p.get("done", 0)) for p in (progress or {}).values() if isinstance(p, dict))


def _task_rows(job: JobRow) -> list[JobTaskRow]:
    return [JobTaskRow(job_id=job.id, task=name) for name in dict.fromkeys(t["name"] for t in job.tasks)]


def _count(s: Any, status: str, jobs: int, samples: int, tasks: dict[str, int] | None = None) -> None:
    """A job entered (+1) or left (-1) a final status, with the samples it scored; `tasks`: the
    jobs of each task that moved (kept per task and status for the job list's task filter)."""
    s.execute(update(JobCountRow).where(JobCountRow.status == status)
              .values(jobs=JobCountRow.jobs + jobs, samples=JobCountRow.samples + samples))
    moved = {t: n for t, n in (tasks or {}).items() if n}
    if not moved:
        return
    known = set(s.scalars(select(JobTaskCountRow.task).where(JobTaskCountRow.status == status,
                                                              JobTaskCountRow.task.in_(list(moved)))))
    for task, n in moved.items():
        if task in known:
            s.execute(update(JobTaskCountRow).where(JobTaskCountRow.task == task, JobTaskCountRow.status == status)
                      .values(jobs=JobTaskCountRow.jobs + n))
        else:
            s.add(JobTaskCountRow(task=task, status=status, jobs=n))


def _tasks_of(job: JobRow, step: int = 1) -> dict[str, int]:
    return {name: step for name in dict.fromkeys(t["name"] for t in job.tasks)}


class JobAccess(Database):
    """The store's access to jobs: add (once per schedule), look up, list, the queue, state changes guarded by status."""

    @staticmethod
    def _new_job(checkpoint: str, checkpoint_path: str, fingerprint: str, schedule: str | None = None,
                 endpoint: str | None = None, job_id: str | None = None, **request: Any) -> JobRow:
        """A queued job; `request` is the suite (tasks, rope, backend, priority, ...), kept whole;
        `endpoint` names the served model it runs on (`checkpoint` is then the endpoint's name)."""
        return JobRow(
            id=job_id or new_job_id(),
            checkpoint=checkpoint,
            checkpoint_path=checkpoint_path,
            fingerprint=fingerprint,
            schedule=schedule,
            endpoint=endpoint,
            request=request,
            task_names="," + ",".join(t["name"] for t in request["tasks"]) + ",",
            priority=request.get("priority", 0),
            status=QUEUED,
            progress={},
            attempts=0,
            created_at=now(),
        )

    def add_job(self, **fields: Any) -> JobRow:
        """Insert a queued job; committed when this returns."""
        with self.writing() as s:
            row = self._new_job(**fields)
            s.add(row)
            s.add_all(_task_rows(row))
        return row

    def add_jobs(self, jobs: list[dict[str, Any]]) -> list[JobRow]:
        """Insert many queued jobs (each `add_job`'s fields) in one transaction, in order."""
        with self.writing() as s:
            rows = []
            for fields in jobs:
                rows.append(self._new_job(**fields))
                s.add(rows[-1])
                s.add_all(_task_rows(rows[-1]))
        return rows

    def add_finished_job(self, started_at: datetime, finished_at: datetime, owner: str,
                         progress: dict[str, Any], rows: Callable[[JobRow], list[ResultRecord]],
                         **fields: Any) -> JobRow:
        """A job that ran elsewhere (`lctx upload`: a local `lctx eval`), inserted succeeded with its
        leaderboard rows in one transaction, as `finish` stores a job that ran here. `owner` says
        where it ran; `progress` its tasks' samples; `fields` are `add_job`'s (a `job_id` chosen
        beforehand: its files are written first)."""
        with self.writing() as s:
            row = self._new_job(**fields)
            row.status, row.owner, row.progress, row.attempts = SUCCEEDED, owner, progress, 1
            row.started_at, row.finished_at = started_at, finished_at
            row.duration_s = max(0.0, (finished_at - started_at).total_seconds())
            s.add(row)
            s.add_all(_task_rows(row))
            s.flush()
            _count(s, SUCCEEDED, 1, samples_done(progress), _tasks_of(row))
            insert_results(s.connection(), row.id, rows(row))
        return row

    @retried
    def add_job_once(self, fingerprint: str, suite_hash: str, **fields: Any) -> JobRow | None:
        """Insert a job and its (fingerprint, suite) submission in one transaction;
        None when that pair was already submitted (by us or by another replica)."""
        try:
            with self.writing() as s:
                row = self._new_job(fingerprint=fingerprint, **fields)
                s.add(row)
                s.add_all(_task_rows(row))
                s.flush()
                s.add(SubmissionRow(fingerprint=fingerprint, suite_hash=suite_hash, job_id=row.id, created_at=now()))
            return row
        except IntegrityError:
            return None

    @retried
    def get_job(self, job_id: str) -> JobRow:
        """One job by id. The hot path of status polling, so it skips the ORM session:
        a Core select on a pooled connection, made into a (transient) JobRow."""
        table = JobRow.__table__
        with self.read_engine.connect() as conn:
            row = conn.execute(select(table).where(table.c.id == job_id)).first()
        if row is None:
            raise Missing("job", job_id, label="")
        return JobRow(**row._mapping)

    def get_jobs(self, job_ids: list[str]) -> list[JobRow]:
        """The jobs of these ids that exist (in no order)."""
        out: list[JobRow] = []
        with self.reading() as s:
            for i in range(0, len(job_ids), 500):
                out += s.scalars(select(JobRow).where(JobRow.id.in_(job_ids[i:i + 500])))
        return out

    def list_jobs(self, status: str | None = None, checkpoint: str | None = None, task: str | None = None,
                  limit: int = 50, offset: int = 0, schedule: str | None = None) -> tuple[list[JobRow], int]:
        where = self._job_filter(status, checkpoint, task, schedule)
        with self.reading() as s:
            if task and not (status or checkpoint or schedule):
                total = sum(self._count_task(s, task).values())
            else:
                total = (s.scalar(select(func.count()).select_from(JobRow).where(*where)) or 0) if where \
                    else sum(self.count_by_status().values())
            rows = s.scalars(select(JobRow).where(*where).order_by(JobRow.created_at.desc(), JobRow.id.desc())
                             .limit(limit).offset(offset))
            return list(rows), total

    def count_listed(self, status: str | None = None, checkpoint: str | None = None, task: str | None = None,
                     schedule: str | None = None) -> dict[str, int]:
        """Jobs per status among all that the list's filters select (not only the page shown)."""
        where = self._job_filter(status, checkpoint, task, schedule)
        if not where:
            return {st: n for st, n in self.count_by_status().items() if n}
        with self.reading() as s:
            if task and not (status or checkpoint or schedule):
                return {st: n for st, n in self._count_task(s, task).items() if n}
            counts = s.execute(select(JobRow.status, func.count()).where(*where).group_by(JobRow.status)).all()
        return {str(st): int(n) for st, n in counts}

    @staticmethod
    def _count_task(s: Any, task: str) -> dict[str, int]:
        """A task's jobs per status: the final ones kept, queued and running counted (few)."""
        counts = dict(s.execute(select(JobTaskCountRow.status, JobTaskCountRow.jobs)
                                .where(JobTaskCountRow.task == task)).all())
        for status in (QUEUED, RUNNING):
            counts[status] = s.scalar(select(func.count()).select_from(JobRow).where(  # read by status: few jobs
                JobRow.status == status, select(JobTaskRow.job_id).where(
                    JobTaskRow.job_id == JobRow.id, JobTaskRow.task == task).exists()))
        return {str(st): int(n or 0) for st, n in counts.items()}

    @staticmethod
    def _job_filter(status: str | None, checkpoint: str | None, task: str | None, schedule: str | None) -> list:
        where = []
        if schedule:
            where.append(JobRow.schedule == schedule)
        if status:
            where.append(JobRow.status == status)
        if checkpoint:
            where.append(JobRow.checkpoint == checkpoint)
        if task:
            where.append(select(JobTaskRow.job_id).where(JobTaskRow.job_id == JobRow.id, JobTaskRow.task == task)
                         .exists())  # probed per job in the list's order: a page reads a page of jobs
        return where

    def count_by_status(self) -> dict[str, int]:
        """Final statuses from the kept counts; queued and running counted (the index holds only them)."""
        with self.reading() as s:
            counts = dict(s.execute(select(JobCountRow.status, JobCountRow.jobs)).all())
            for status in (QUEUED, RUNNING):
                counts[status] = s.scalar(select(func.count()).select_from(JobRow).where(JobRow.status == status))
        return {st: int(counts.get(st) or 0) for st in JobStatus}

    def samples_scored(self) -> int:
        """Samples scored by started jobs: the finished ones' kept sum and the running ones' progress."""
        with self.reading() as s:
            total = int(s.scalar(select(func.sum(JobCountRow.samples))) or 0)
            for progress in s.scalars(select(JobRow.progress).where(JobRow.status == RUNNING)):
                total += samples_done(progress)
        return total

    @retried
    def claim_next(self, owner: str) -> JobRow | None:
        """Move the highest-priority, oldest queued job to running for `owner`."""
        for _ in range(5):
            with self.reading() as s:
                job_id = s.scalar(select(JobRow.id).where(JobRow.status == QUEUED)
                                  .order_by(JobRow.priority.desc(), JobRow.created_at, JobRow.id).limit(1))
            if job_id is None:
                return None
            t = now()
            with self.writing() as s:
                res = s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == QUEUED).values(
                    status=RUNNING, owner=owner, heartbeat_at=t, started_at=func.coalesce(JobRow.started_at, t),
                    attempts=JobRow.attempts + 1, error=None))
            if res.rowcount == 1:
                return self.get_job(job_id)
        return None

    def claim_many(self, owner: str, limit: int) -> list[JobRow]:
        """Up to `limit` queued jobs to running for `owner` in one transaction, in `claim_next`'s
        order (highest priority, oldest first): what `limit` calls of it claim."""
        t = now()
        with self.writing() as s:
            ids = list(s.scalars(select(JobRow.id).where(JobRow.status == QUEUED)
                                 .order_by(JobRow.priority.desc(), JobRow.created_at, JobRow.id).limit(limit)))
            if not ids:
                return []
            s.execute(update(JobRow).where(JobRow.id.in_(ids), JobRow.status == QUEUED).values(
                status=RUNNING, owner=owner, heartbeat_at=t, started_at=func.coalesce(JobRow.started_at, t),
                attempts=JobRow.attempts + 1, error=None))
            rows = {r.id: r for r in s.scalars(select(JobRow).where(JobRow.id.in_(ids), JobRow.owner == owner,
                                                                    JobRow.status == RUNNING))}
        return [rows[i] for i in ids if i in rows]

    @retried
    def heartbeat(self, job_ids: list[str], owner: str) -> None:
        if job_ids:
            with self.writing() as s:
                s.execute(update(JobRow).where(JobRow.id.in_(job_ids), JobRow.owner == owner,
                                               JobRow.status == RUNNING).values(heartbeat_at=now()))

    @retried
    def set_progress(self, job_id: str, progress: dict[str, Any]) -> None:
        with self.writing() as s:
            s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == RUNNING)
                      .values(progress=progress, heartbeat_at=now()))

    @retried
    def finish(self, job_id: str, status: str, error: str | None = None,
               progress: dict[str, Any] | None = None,
               rows: Callable[[JobRow], list[ResultRecord]] | None = None) -> bool:
        """running -> succeeded/failed, with its error and last `progress` in the same write, and
        for a succeeded job its leaderboard rows (`rows(job)`, made from the finished row) in the
        same transaction: no succeeded job without its rows, whatever dies in between; False when
        the job is no longer running (cancelled)."""
        t = now()
        with self.writing() as s:
            job = s.get(JobRow, job_id)
            if job is None or job.status != RUNNING:
                return False
            job.status, job.error, job.finished_at = status, error, t
            if progress is not None:
                job.progress = progress
            _count(s, status, 1, samples_done(job.progress), _tasks_of(job))
            job.duration_s = (t - job.started_at).total_seconds() if job.started_at else None
            if rows is not None and status == SUCCEEDED:
                s.flush()
                insert_results(s.connection(), job_id, rows(job))
            return True

    def finish_many(self, jobs: list[tuple[str, dict[str, Any] | None]], status: str) -> list[bool]:
        """`finish` of each (job id, its last progress) in turn, in one transaction: each job
        its own finishing time; False for one no longer running."""
        done = []
        with self.writing() as s:
            found = {j.id: j for j in s.scalars(select(JobRow).where(JobRow.id.in_([i for i, _ in jobs])))}
            total = samples = 0
            tasks: dict[str, int] = {}
            for job_id, progress in jobs:
                job = found.get(job_id)
                if job is None or job.status != RUNNING:
                    done.append(False)
                    continue
                t = now()
                job.status, job.error, job.finished_at = status, None, t
                if progress is not None:
                    job.progress = progress
                total, samples = total + 1, samples + samples_done(job.progress)
                for task in _tasks_of(job):
                    tasks[task] = tasks.get(task, 0) + 1
                job.duration_s = (t - job.started_at).total_seconds() if job.started_at else None
                done.append(True)
            if total:
                _count(s, status, total, samples, tasks)
        return done

    def cancel(self, job_id: str) -> JobRow:
        with self.writing() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                raise Missing("job", job_id, label="")
            if job.status in FINAL:
                raise Conflict(f"job {job_id} is already {job.status}; only queued or running jobs can be cancelled")
            job.status, job.finished_at = CANCELLED, now()
            _count(s, CANCELLED, 1, samples_done(job.progress), _tasks_of(job))
            if job.started_at:
                job.duration_s = (job.finished_at - job.started_at).total_seconds()
            return job

    @retried
    def resume(self, job_id: str) -> JobRow:
        """failed/cancelled -> queued: the job runs again from what it recorded (finished
        tasks kept, recorded samples not run again), e.g. once the disk has room again."""
        with self.writing() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                raise Missing("job", job_id, label="")
            if job.status not in (FAILED, CANCELLED):
                raise Conflict(f"job {job_id} is {job.status}; only failed or cancelled jobs can be resumed")
            _count(s, job.status, -1, -samples_done(job.progress), _tasks_of(job, -1))
            job.status, job.owner, job.error, job.finished_at, job.duration_s = QUEUED, None, None, None, None
            return job

    def requeue(self, job_id: str, error: str | None = None) -> bool:
        """running -> queued (a dead worker); the job resumes from its samples."""
        with self.writing() as s:
            res = s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status == RUNNING)
                            .values(status=QUEUED, owner=None, error=error))
            return res.rowcount == 1

    @retried
    def recover(self, lease_seconds: float, owner: str | None = None) -> list[str]:
        """Jobs left running by a dead process (ours from a previous life, or anyone's
        whose heartbeat stopped) go back to the queue."""
        cutoff = now() - timedelta(seconds=lease_seconds)
        with self.writing() as s:
            ids = list(s.scalars(select(JobRow.id).where(JobRow.status == RUNNING).where(
                (JobRow.owner == (owner or "")) | (JobRow.heartbeat_at < cutoff) | (JobRow.heartbeat_at.is_(None)))))
            if ids:
                s.execute(update(JobRow).where(JobRow.id.in_(ids), JobRow.status == RUNNING)
                          .values(status=QUEUED, owner=None))
        return ids

    @retried
    def finished_since(self, owner: str, since: datetime) -> list[JobRow]:
        """Jobs `owner` ran that reached a final state at or after `since` (the API's job metrics)."""
        with self.reading() as s:
            return list(s.scalars(select(JobRow).where(JobRow.owner == owner, JobRow.finished_at >= since,
                                                       JobRow.status.in_(FINAL))))
