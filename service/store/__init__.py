"""The durable store: jobs, checkpoints, endpoints, schedules and their submissions, the
leaderboard's rows, regressions and the server replicas.

SQLAlchemy 2. SQLite by default (WAL, busy timeout; writes take the lock up front with
BEGIN IMMEDIATE so a read-then-write transaction never fails on a stale snapshot),
PostgreSQL by URL. State changes of a job are conditional updates (`WHERE status = ...`),
so two executors or two replicas can never both claim, finish or requeue one job.

The schema is Alembic's: `upgrade()` (run by `lctx serve` and the app's start-up) brings
a database to the newest revision in `service/migrations/versions/`, adopts a database
made before migrations existed as the first revision, and refuses one newer than this code.

The package: `models.py` (the tables), `db.py` (engines, sessions, migrations, `retried`) and
one module of access per table (`checkpoints`, `endpoints`, `jobs`, `schedules`, `replicas`, `results`: the
stored leaderboard rows),
which `Store` combines: one object per process, as before."""

from __future__ import annotations

from service.store.checkpoints import CheckpointAccess
from service.store.db import Database, retried
from service.store.endpoints import EndpointAccess
from service.store.jobs import JobAccess
from service.store.models import (
    Base,
    CheckpointRow,
    EndpointRow,
    JobRow,
    JobTaskRow,
    RegressionRow,
    ReplicaRow,
    ResultColumnRow,
    ResultValueRow,
    ScheduleRow,
    SubmissionRow,
    TaskResultRow,
    now,
)
from service.store.regressions import RegressionAccess
from service.store.replicas import ReplicaAccess
from service.store.results import ResultAccess
from service.store.schedules import ScheduleAccess

__all__ = ["Base", "CheckpointRow", "Database", "EndpointRow", "JobRow", "JobTaskRow", "RegressionRow", "ReplicaRow", "ResultColumnRow",
           "ResultValueRow", "ScheduleRow", "Store", "SubmissionRow", "TaskResultRow", "now", "retried"]


class Store(CheckpointAccess, EndpointAccess, JobAccess, ScheduleAccess, ReplicaAccess, ResultAccess,
            RegressionAccess):
    """All database access of the service. Methods return detached ORM rows."""
