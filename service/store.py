"""The durable store: jobs, checkpoints, schedules and schedule submissions.

SQLAlchemy 2. SQLite by default (WAL, busy timeout; writes take the lock up front with
BEGIN IMMEDIATE so a read-then-write transaction never fails on a stale snapshot),
PostgreSQL by URL. State changes of a job are conditional updates (`WHERE status = ...`),
so two executors or two replicas can never both claim, finish or requeue one job.

The schema is Alembic's: `upgrade()` (run by `lctx serve` and the app's start-up) brings
a database to the newest revision in `service/migrations/versions/`, adopts a database
made before migrations existed as the first revision, and refuses one newer than this code."""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    delete,
    event,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from service.errors import Conflict, NotFound, SchemaError
from service.status import CANCELLED, FAILED, FINAL, QUEUED, RUNNING, SUCCEEDED, JobStatus

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
FIRST_REVISION = "0001"  # the schema `Base.metadata.create_all` made before migrations existed
MIGRATION_LOCK = 0x6C637478  # PostgreSQL advisory lock: one replica migrates at a time ("lctx")


log = logging.getLogger("lctx.store")


F = TypeVar("F", bound=Callable[..., Any])


def retried(method: F) -> F:
    """A call the dispatcher, scheduler or a worker makes, retried while the database server
    is away (restarted, failed over: connection errors), for up to the store's
    `retry_seconds`, so a running job outlives a PostgreSQL restart instead of failing. The
    API's own store does not retry: a request answers 503 at once (service/app.py). Writes
    retried this way are idempotent or guarded by the job's status (a commit whose answer was
    lost finds the row already changed)."""

    @functools.wraps(method)
    def call(self: Store, *args: Any, **kwargs: Any) -> Any:
        deadline, delay, said = None, 0.1, False
        while True:
            try:
                return method(self, *args, **kwargs)
            except (OperationalError, InterfaceError) as e:
                t = time.monotonic()
                deadline = deadline or t + self.retry_seconds
                if self.url.startswith("sqlite") or t >= deadline:  # SQLite's own timeout has waited
                    raise
                if not said:
                    log.warning("the database is unavailable (%s); %s retries for up to %.0f s",
                                str(e.orig or e).splitlines()[0], method.__name__, self.retry_seconds)
                    said = True
                time.sleep(min(delay, deadline - t))
                delay = min(delay * 2, 2.0)

    return call  # type: ignore[return-value]


def now() -> datetime:
    """UTC, naive: SQLite keeps no zone, so every timestamp is stored as naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class CheckpointRow(Base):
    __tablename__ = "checkpoints"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    variant: Mapped[str] = mapped_column(String(64))
    parameters: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)


class EndpointRow(Base):
    """A served model (an OpenAI-compatible server) registered like a checkpoint. The API
    key is not here: only the name of the environment variable that holds it."""

    __tablename__ = "endpoints"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    base_url: Mapped[str] = mapped_column(Text)
    served_model: Mapped[str] = mapped_column(String(512))
    api_style: Mapped[str] = mapped_column(String(16))
    tokenizer: Mapped[str | None] = mapped_column(Text, nullable=True)  # None: the server's /tokenize
    context_length: Mapped[int] = mapped_column(Integer)
    concurrency: Mapped[int] = mapped_column(Integer)
    timeout_s: Mapped[float] = mapped_column(Float)
    max_retries: Mapped[int] = mapped_column(Integer)
    api_key_env: Mapped[str | None] = mapped_column(String(128), nullable=True)
    capabilities: Mapped[dict[str, Any]] = mapped_column(JSON)  # what the probe found at registration
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    checkpoint: Mapped[str] = mapped_column(String(128), index=True)
    checkpoint_path: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64))
    # The request's suite as the job records it (tasks with every option, rope, backend,
    # priority and any field `service.schemas.Suite` gains): the one declaration of a job's
    # fields. The columns beside it are what the store filters and orders on.
    request: Mapped[dict[str, Any]] = mapped_column(JSON, server_default="{}")
    task_names: Mapped[str] = mapped_column(Text)  # ",passkey,longbench," for filtering
    priority: Mapped[int] = mapped_column(Integer, default=0)  # the queue's order
    status: Mapped[str] = mapped_column(String(16), default=QUEUED)
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    schedule: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    duration_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    endpoint: Mapped[str | None] = mapped_column(String(128), nullable=True)  # a served model in place of weights

    __table_args__ = (Index("ix_jobs_queue", "status", "priority", "created_at"),
                      Index("ix_jobs_owner_finished", "owner", "finished_at"))

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return self.request["tasks"]

    @property
    def rope(self) -> Any:
        return self.request.get("rope")

    @property
    def backend(self) -> str:
        return self.request.get("backend", "auto")


class ScheduleRow(Base):
    __tablename__ = "schedules"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    cron: Mapped[str] = mapped_column(String(128))
    watch: Mapped[list[str]] = mapped_column(JSON)
    suite: Mapped[dict[str, Any]] = mapped_column(JSON)
    suite_hash: Mapped[str] = mapped_column(String(64))
    next_run_at: Mapped[datetime] = mapped_column(DateTime)
    last_run_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)


class SubmissionRow(Base):
    """One row per (checkpoint fingerprint, suite): the unique constraint is what stops
    a restarted scheduler or a second replica from submitting the same suite twice."""

    __tablename__ = "submissions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    suite_hash: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)

    __table_args__ = (UniqueConstraint("fingerprint", "suite_hash", name="uq_submission"),)


class ReplicaRow(Base):
    """A server that runs jobs: its id names the jobs it runs (`JobRow.owner`); `instance`
    is drawn per process, so a second process claiming a live replica's id is told apart
    from that replica's own restart."""

    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    instance: Mapped[str] = mapped_column(String(32))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    home: Mapped[str] = mapped_column(Text)
    url: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime)


def _alembic() -> tuple[Any, Any]:
    """Alembic's config and script directory for the migrations shipped in this package."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config, ScriptDirectory.from_config(config)


def _our_tables(conn: Connection) -> bool:
    """True when the database holds the store's tables, False when it holds none of them.
    Some but not all, with no alembic_version (checked by the caller through `current`),
    is a database lctx did not make: refused."""
    present = set(inspect(conn).get_table_names())
    ours = {"checkpoints", "jobs", "schedules", "submissions"}
    if not present & ours:
        return False
    if (missing := ours - present) and "alembic_version" not in present:
        raise SchemaError(f"the database has some lctx tables but not {', '.join(sorted(missing))}, and no "
                          "alembic_version table: it was not made by lctx; give an empty database or restore a backup")
    return True


def _sqlite_engines(url: str) -> tuple[Engine, Engine]:
    """A read engine (autocommit: each SELECT sees the latest commit, and status polls skip
    the BEGIN/ROLLBACK round trip) and a write engine (BEGIN IMMEDIATE)."""

    def make(immediate: bool) -> Engine:
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=8)

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # no implicit BEGIN: writes issue their own below
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        if immediate:

            @event.listens_for(engine, "begin")
            def _begin(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine

    return make(False), make(True)


class Store:
    """All database access of the service. Methods return detached ORM rows."""

    def __init__(self, url: str, retry_seconds: float = 0.0) -> None:
        self.url, self.retry_seconds = url, retry_seconds  # see `retried`
        if url.startswith("sqlite"):
            self.read_engine, self.write_engine = _sqlite_engines(url)
        else:
            connect_args = {"connect_timeout": 5} if url.startswith("postgresql") else {}
            engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args=connect_args)
            self.read_engine = self.write_engine = engine
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)
        self._write = sessionmaker(self.write_engine, expire_on_commit=False)

    def upgrade(self) -> str:
        """Bring the database to this code's newest schema revision, in one transaction (on
        PostgreSQL under an advisory lock, so replicas starting together migrate once).
        Returns that revision. A database at a revision this code does not know (made by
        a newer lctx) is refused with SchemaError; tables made before migrations existed
        are adopted as the first revision, then upgraded."""
        from alembic import command
        from alembic.runtime.migration import MigrationContext

        config, script = _alembic()
        head = script.get_current_head()
        with self.write_engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            current = MigrationContext.configure(conn).get_current_heads()
            known = {rev.revision for rev in script.walk_revisions()}
            unknown = [r for r in current if r not in known]
            if unknown:
                raise SchemaError(f"the database {self.safe_url} is at schema revision {', '.join(unknown)}, which "
                                  f"this lctx does not know (its newest is {head}): a newer lctx has upgraded it; "
                                  "upgrade lctx to that version (or newer) before starting it on this database")
            config.attributes["connection"] = conn
            present = _our_tables(conn)
            if not current and present:
                command.stamp(config, FIRST_REVISION)  # made by create_all before migrations existed
            elif current and not present:
                command.stamp(config, "base", purge=True)  # every table dropped by hand: start afresh
            command.upgrade(config, "head")
        return head

    def create_all(self) -> None:
        """The store's tables, at the newest revision: `upgrade()` (the name tests and older callers use)."""
        self.upgrade()

    def revision(self) -> str | None:
        """The schema revision the database is at (None: no schema yet)."""
        from alembic.runtime.migration import MigrationContext

        with self.read_engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    @property
    def safe_url(self) -> str:
        """The URL with any password masked, for messages."""
        from sqlalchemy.engine import make_url

        return make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        self.read_engine.dispose()
        if self.write_engine is not self.read_engine:
            self.write_engine.dispose()

    def ping(self) -> None:
        with self.read_engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    @contextmanager
    def reading(self) -> Iterator[Session]:
        with self._read() as s, s.begin():
            yield s

    @contextmanager
    def writing(self) -> Iterator[Session]:
        with self._write() as s, s.begin():
            yield s

    # -- checkpoints ---------------------------------------------------------------

    def add_checkpoint(self, name: str, path: str, fingerprint: str, variant: str, parameters: int) -> CheckpointRow:
        """Register; the same name and path again refreshes the fingerprint."""
        with self.writing() as s:
            row = s.get(CheckpointRow, name)
            if row is not None and row.path != path:
                raise Conflict(f"checkpoint name {name!r} is already registered for {row.path}; "
                               "pick another name or delete the old one first")
            if row is None:
                row = CheckpointRow(name=name, path=path, fingerprint=fingerprint, variant=variant,
                                    parameters=parameters, created_at=now())
                s.add(row)
            else:
                row.fingerprint, row.variant, row.parameters = fingerprint, variant, parameters
            return row

    @retried
    def get_checkpoint(self, name: str) -> CheckpointRow:
        with self.reading() as s:
            row = s.get(CheckpointRow, name)
        if row is None:
            raise NotFound(f"no checkpoint named {name!r}; register it with POST /v1/checkpoints")
        return row

    @retried
    def find_checkpoint(self, name: str) -> CheckpointRow | None:
        with self.reading() as s:
            return s.get(CheckpointRow, name)

    def checkpoint_by_path(self, path: str) -> CheckpointRow | None:
        with self.reading() as s:
            return s.scalars(select(CheckpointRow).where(CheckpointRow.path == path).limit(1)).first()

    def list_checkpoints(self) -> list[CheckpointRow]:
        with self.reading() as s:
            return list(s.scalars(select(CheckpointRow).order_by(CheckpointRow.name)))

    def delete_checkpoint(self, name: str) -> None:
        with self.writing() as s:
            row = s.get(CheckpointRow, name)
            if row is None:
                raise NotFound(f"no checkpoint named {name!r}")
            s.delete(row)

    # -- endpoints -------------------------------------------------------------------

    def add_endpoint(self, row: EndpointRow) -> EndpointRow:
        """Register; the same name again replaces the registration (re-probed by the caller)."""
        with self.writing() as s:
            if s.get(CheckpointRow, row.name) is not None:
                raise Conflict(f"{row.name!r} is already a checkpoint's name; pick another name for the endpoint")
            old = s.get(EndpointRow, row.name)
            if old is not None:
                s.delete(old)
                s.flush()
            s.add(row)
            return row

    @retried
    def get_endpoint(self, name: str) -> EndpointRow:
        with self.reading() as s:
            row = s.get(EndpointRow, name)
        if row is None:
            raise NotFound(f"no endpoint named {name!r}; register it with POST /v1/endpoints")
        return row

    def list_endpoints(self) -> list[EndpointRow]:
        with self.reading() as s:
            return list(s.scalars(select(EndpointRow).order_by(EndpointRow.name)))

    def delete_endpoint(self, name: str) -> None:
        with self.writing() as s:
            row = s.get(EndpointRow, name)
            if row is None:
                raise NotFound(f"no endpoint named {name!r}")
            s.delete(row)

    # -- jobs ------------------------------------------------------------------------

    @staticmethod
    def _new_job(checkpoint: str, checkpoint_path: str, fingerprint: str, schedule: str | None = None,
                 endpoint: str | None = None, **request: Any) -> JobRow:
        """A queued job; `request` is the suite (tasks, rope, backend, priority, ...), kept whole;
        `endpoint` names the served model it runs on (`checkpoint` is then the endpoint's name)."""
        return JobRow(
            id=uuid.uuid4().hex[:16],
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
        return row

    @retried
    def add_job_once(self, fingerprint: str, suite_hash: str, **fields: Any) -> JobRow | None:
        """Insert a job and its (fingerprint, suite) submission in one transaction;
        None when that pair was already submitted (by us or by another replica)."""
        try:
            with self.writing() as s:
                row = self._new_job(fingerprint=fingerprint, **fields)
                s.add(row)
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
            raise NotFound(f"no job {job_id!r}; list jobs with GET /v1/jobs")
        return JobRow(**row._mapping)

    def list_jobs(self, status: str | None = None, checkpoint: str | None = None, task: str | None = None,
                  limit: int = 50, offset: int = 0, schedule: str | None = None) -> tuple[list[JobRow], int]:
        where = []
        if schedule:
            where.append(JobRow.schedule == schedule)
        if status:
            where.append(JobRow.status == status)
        if checkpoint:
            where.append(JobRow.checkpoint == checkpoint)
        if task:
            where.append(JobRow.task_names.contains(f",{task},", autoescape=True))
        with self.reading() as s:
            total = s.scalar(select(func.count()).select_from(JobRow).where(*where)) or 0
            rows = s.scalars(select(JobRow).where(*where).order_by(JobRow.created_at.desc(), JobRow.id)
                             .limit(limit).offset(offset))
            return list(rows), total

    def count_by_status(self) -> dict[str, int]:
        with self.reading() as s:
            counts = dict(s.execute(select(JobRow.status, func.count()).group_by(JobRow.status)).all())
        return {st: int(counts.get(st, 0)) for st in JobStatus}

    def samples_scored(self) -> int:
        total = 0
        with self.reading() as s:
            for progress in s.scalars(select(JobRow.progress).where(JobRow.status != QUEUED)):
                total += sum(int(p.get("done", 0)) for p in (progress or {}).values())
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
    def finish(self, job_id: str, status: str, error: str | None = None) -> bool:
        """running -> succeeded/failed; False when the job is no longer running (cancelled)."""
        t = now()
        with self.writing() as s:
            job = s.get(JobRow, job_id)
            if job is None or job.status != RUNNING:
                return False
            job.status, job.error, job.finished_at = status, error, t
            job.duration_s = (t - job.started_at).total_seconds() if job.started_at else None
            return True

    def cancel(self, job_id: str) -> JobRow:
        with self.writing() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                raise NotFound(f"no job {job_id!r}")
            if job.status in FINAL:
                raise Conflict(f"job {job_id} is already {job.status}; only queued or running jobs can be cancelled")
            job.status, job.finished_at = CANCELLED, now()
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
                raise NotFound(f"no job {job_id!r}")
            if job.status not in (FAILED, CANCELLED):
                raise Conflict(f"job {job_id} is {job.status}; only failed or cancelled jobs can be resumed")
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

    @retried
    def latest_succeeded(self, task: str) -> list[JobRow]:
        """Succeeded jobs that ran `task` (or `task/...`), newest first."""
        with self.reading() as s:
            return list(s.scalars(select(JobRow).where(JobRow.status == SUCCEEDED)
                                  .where(JobRow.task_names.contains(f",{task.split('/')[0]},", autoescape=True))
                                  .order_by(JobRow.finished_at.desc())))

    # -- schedules ---------------------------------------------------------------------

    def add_schedule(self, row: ScheduleRow) -> ScheduleRow:
        try:
            with self.writing() as s:
                s.add(row)
        except IntegrityError as e:
            raise Conflict(f"a schedule named {row.name!r} exists; delete it first or pick another name") from e
        return row

    def get_schedule(self, name: str) -> ScheduleRow:
        with self.reading() as s:
            row = s.get(ScheduleRow, name)
        if row is None:
            raise NotFound(f"no schedule named {name!r}")
        return row

    def find_schedule(self, name: str) -> ScheduleRow | None:
        with self.reading() as s:
            return s.get(ScheduleRow, name)

    @retried
    def list_schedules(self) -> list[ScheduleRow]:
        with self.reading() as s:
            return list(s.scalars(select(ScheduleRow).order_by(ScheduleRow.name)))

    def delete_schedule(self, name: str) -> None:
        with self.writing() as s:
            row = s.get(ScheduleRow, name)
            if row is None:
                raise NotFound(f"no schedule named {name!r}")
            s.delete(row)

    @retried
    def due_schedules(self, at: datetime) -> list[ScheduleRow]:
        with self.reading() as s:
            return list(s.scalars(select(ScheduleRow).where(ScheduleRow.next_run_at <= at)))

    @retried
    def claim_tick(self, name: str, expected_next: datetime, new_next: datetime, at: datetime) -> bool:
        """Advance a due schedule; only one replica wins a given tick."""
        with self.writing() as s:
            res = s.execute(update(ScheduleRow).where(ScheduleRow.name == name,
                                                      ScheduleRow.next_run_at == expected_next)
                            .values(next_run_at=new_next, last_run_at=at))
            return res.rowcount == 1

    # -- replicas ----------------------------------------------------------------------

    @retried
    def claim_replica(self, row: ReplicaRow, lease_seconds: float, dead: Callable[[ReplicaRow], bool]) -> None:
        """Register `row` under its id. Refused (Conflict) while another instance holds the id
        and is alive: a heartbeat within `lease_seconds` and not `dead(holder)`. Our own
        instance again only refreshes the row."""
        for _ in range(2):
            try:
                with self.writing() as s:
                    held = s.scalars(select(ReplicaRow).where(ReplicaRow.id == row.id).with_for_update()).first()
                    if held is not None and held.instance != row.instance:
                        age = (now() - held.heartbeat_at).total_seconds()
                        if age < lease_seconds and not dead(held):
                            raise Conflict(
                                f"replica id {row.id!r} is held by a live lctx server: host {held.host}, pid "
                                f"{held.pid}, home {held.home}, {held.url}, started {held.started_at:%Y-%m-%d %H:%M:%S}"
                                f" UTC, last heartbeat {age:.0f} s ago; stop that server, or give this one an "
                                "id of its own with LCTX_REPLICA_ID")
                    if held is not None:
                        s.delete(held)
                        s.flush()
                    s.add(ReplicaRow(id=row.id, instance=row.instance, host=row.host, pid=row.pid, home=row.home,
                                     url=row.url, started_at=row.started_at, heartbeat_at=now()))
                return
            except IntegrityError:  # another process inserted the id between our read and write: read it
                continue
        raise Conflict(f"replica id {row.id!r} is being claimed by another server right now; retry, or set LCTX_REPLICA_ID")

    @retried
    def heartbeat_replica(self, replica_id: str, instance: str) -> bool:
        """False when the row is no longer ours (our lease lapsed and another server took the id)."""
        with self.writing() as s:
            res = s.execute(update(ReplicaRow).where(ReplicaRow.id == replica_id, ReplicaRow.instance == instance)
                            .values(heartbeat_at=now()))
            return res.rowcount == 1

    @retried
    def release_replica(self, replica_id: str, instance: str) -> None:
        """A clean stop: the id is free at once."""
        with self.writing() as s:
            s.execute(delete(ReplicaRow).where(ReplicaRow.id == replica_id, ReplicaRow.instance == instance))

    @retried
    def get_replica(self, replica_id: str) -> ReplicaRow | None:
        with self.reading() as s:
            return s.get(ReplicaRow, replica_id)
