"""The store's tables (SQLAlchemy rows; their migrations are in service/migrations/) and the
one clock every timestamp is stored by."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from service.core.status import QUEUED


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
                      Index("ix_jobs_owner_finished", "owner", "finished_at"),
                      Index("ix_jobs_created", "created_at", "id"),  # the job list's order
                      Index("ix_jobs_finished", "status", "finished_at", "id"))  # a data migration's order

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
    # what the schedule watches its jobs for (migration 0011): regression threshold, pinned baseline
    # job, webhooks (service/schemas.py's Alerts); None: regressions at the default threshold, no webhook
    alerts: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class RegressionRow(Base):
    """A drop of one column of one task view between a lineage's new checkpoint and the previous
    one (or the schedule's pinned baseline) whose paired 95% interval excludes zero and which is
    beyond the schedule's threshold (service/regressions.py; migration 0011)."""

    __tablename__ = "regressions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    baseline_job_id: Mapped[str] = mapped_column(String(32))
    against: Mapped[str] = mapped_column(String(16))  # "previous" or "pinned"
    schedule: Mapped[str | None] = mapped_column(String(128), nullable=True)
    lineage: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    checkpoint: Mapped[str] = mapped_column(String(128))
    task: Mapped[str] = mapped_column(String(200))
    column: Mapped[str] = mapped_column(String(200))
    value: Mapped[float] = mapped_column(Float)
    baseline_value: Mapped[float] = mapped_column(Float)
    difference: Mapped[float] = mapped_column(Float)
    low: Mapped[float] = mapped_column(Float)
    high: Mapped[float] = mapped_column(Float)
    paired: Mapped[bool] = mapped_column(Boolean)
    threshold: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)

    __table_args__ = (Index("ix_regressions_created", "created_at"), Index("ix_regressions_job", "job_id"),
                      UniqueConstraint("job_id", "baseline_job_id", "task", "column", name="uq_regression"))


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


class JobTaskRow(Base):
    """Which tasks a job runs, one row each: the job list's and the leaderboard's task filter is
    an index lookup, not a LIKE over a joined column."""

    __tablename__ = "job_tasks"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    task: Mapped[str] = mapped_column(String(64), primary_key=True)

    __table_args__ = (Index("ix_job_tasks_task", "task", "job_id"),)


class JobCountRow(Base):
    """Jobs in each final status and the samples they scored, kept by the state changes that
    enter or leave it: /metrics reads these few rows, not every job's progress."""

    __tablename__ = "job_counts"

    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    jobs: Mapped[int] = mapped_column(BigInteger, default=0)
    samples: Mapped[int] = mapped_column(BigInteger, default=0)


class TaskResultRow(Base):
    """One leaderboard row of one job: a task view (`passkey`, `longbench/qasper`) with the setting
    it ran under, stored when the job succeeded (service/standings.py). `current`: the newest
    row of its setting key (checkpoint fingerprint, RoPE, backend, scoring options, data
    revision); `lineage_current`: the newest of its lineage key (the checkpoint's folder in
    place of its fingerprint). `rank` orders by the headline, best first (ascending)."""

    __tablename__ = "task_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    task: Mapped[str] = mapped_column(String(200))
    checkpoint: Mapped[str] = mapped_column(String(128))
    fingerprint: Mapped[str] = mapped_column(String(64))
    lineage: Mapped[str | None] = mapped_column(String(1024), nullable=True)  # the checkpoint's folder, as clients see it
    schedule: Mapped[str | None] = mapped_column(String(128), nullable=True)
    rope: Mapped[str] = mapped_column(String(128))
    backend: Mapped[str] = mapped_column(String(16))
    thinking: Mapped[str | None] = mapped_column(String(32), nullable=True)
    data_revision: Mapped[str | None] = mapped_column(String(64), nullable=True)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    setting: Mapped[str] = mapped_column(String(1024))
    setting_key: Mapped[str] = mapped_column(String(40))
    lineage_key: Mapped[str] = mapped_column(String(40))
    finished_at: Mapped[datetime] = mapped_column(DateTime)
    trained_context: Mapped[int | None] = mapped_column(Integer, nullable=True)
    beyond_context: Mapped[list[int]] = mapped_column(JSON)
    headline: Mapped[str | None] = mapped_column(String(200), nullable=True)
    unranked: Mapped[bool] = mapped_column(Boolean)  # no headline value: sorted last
    rank: Mapped[float | None] = mapped_column(Float, nullable=True)
    current: Mapped[bool] = mapped_column(Boolean, default=False)
    lineage_current: Mapped[bool] = mapped_column(Boolean, default=False)

    # Each filter's index leads with the task and the flag, so it matches more of a query's equalities
    # than the board's own index (SQLite plans without statistics: the most equalities win).
    __table_args__ = (
        Index("ix_task_results_board", "task", "current", "unranked", "rank", "checkpoint", "setting"),
        Index("ix_task_results_lineage_board", "task", "lineage_current", "unranked", "rank", "checkpoint", "setting"),
        Index("ix_task_results_newest", "task", "current", "finished_at"),
        Index("ix_task_results_job", "job_id", "task"),
        Index("ix_task_results_fingerprint", "task", "fingerprint", "finished_at"),  # a checkpoint's newest (0011)
        Index("ix_task_results_setting", "task", "setting_key", "current", "finished_at"),
        Index("ix_task_results_lineage_key", "task", "lineage_key", "lineage_current", "finished_at"),
        Index("ix_task_results_lineage", "task", "current", "lineage", "finished_at"),
        # one lineage's page in the board's order (migration 0008)
        Index("ix_task_results_lineage_rank", "task", "current", "lineage", "unranked", "rank", "checkpoint", "setting"),
        Index("ix_task_results_lineage_runs", "task", "lineage_current", "lineage", "finished_at"),
        Index("ix_task_results_checkpoint", "task", "current", "checkpoint", "finished_at"),
        Index("ix_task_results_schedule", "task", "current", "schedule", "finished_at"),
        # a filter's page in the board's order: a range read that stops at its rows (migration 0009)
        Index("ix_task_results_rope_rank", "task", "current", "rope", "unranked", "rank", "checkpoint", "setting"),
        Index("ix_task_results_backend_rank", "task", "current", "backend", "unranked", "rank", "checkpoint",
              "setting"),
        Index("ix_task_results_schedule_rank", "task", "current", "schedule", "unranked", "rank", "checkpoint",
              "setting"),
    )


class ResultValueRow(Base):
    """One column of a leaderboard row: a metric, or a series point `<series>.<axis>=<key>`.
    With its row's task, `current` flag, checkpoint and setting and its `rank` (the value, negated
    where the catalog says higher is better: ascending is best first), so a board sorted by any
    column is a walk of `ix_result_values_board` that stops at its page (migration 0009)."""

    __tablename__ = "result_values"

    result_id: Mapped[int] = mapped_column(ForeignKey("task_results.id", ondelete="CASCADE"), primary_key=True)
    column: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    task: Mapped[str | None] = mapped_column(String(200), nullable=True)
    current: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    unranked: Mapped[bool | None] = mapped_column(Boolean, nullable=True)  # no value: sorted last
    rank: Mapped[float | None] = mapped_column(Float, nullable=True)
    checkpoint: Mapped[str | None] = mapped_column(String(128), nullable=True)
    setting: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    stderr: Mapped[float | None] = mapped_column(Float, nullable=True)  # the value's standard error (0011)

    __table_args__ = (Index("ix_result_values_board", "task", "column", "current", "unranked", "rank", "checkpoint",
                            "setting", "result_id"),)


class BoardCountRow(Base):
    """How many rows of a task view hold a flag (`current`: per fingerprint; `lineage_current`:
    per lineage), in the whole view (dimension and value '') or with one value of a fixed filter
    (lineage, schedule, rope, backend, thinking); `column` '' counts the rows, a column's name
    the rows that have it. Kept in the transaction that moves a flag: a page's `total` and
    columns without counting its rows (migration 0009)."""

    __tablename__ = "board_counts"

    task: Mapped[str] = mapped_column(String(200), primary_key=True)
    flag: Mapped[str] = mapped_column(String(16), primary_key=True)
    dimension: Mapped[str] = mapped_column(String(16), primary_key=True)
    value: Mapped[str] = mapped_column(String(1024), primary_key=True)
    column: Mapped[str] = mapped_column(String(200), primary_key=True)
    rows: Mapped[int] = mapped_column(BigInteger, default=0)


class JobTaskCountRow(Base):
    """Jobs of a task in each final status, kept by the state changes that enter or leave it (as
    `job_counts`): the job list filtered by a task counts its statuses without reading its jobs
    (migration 0009)."""

    __tablename__ = "job_task_counts"

    task: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    jobs: Mapped[int] = mapped_column(BigInteger, default=0)


class ResultColumnRow(Base):
    """A task view's column and what it means (the newest row's word on it), with how many
    current rows (per fingerprint, per lineage) have it: the whole table's columns without
    reading its rows."""

    __tablename__ = "result_columns"

    task: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    higher_is_better: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    unit: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    series: Mapped[str | None] = mapped_column(String(200), nullable=True)
    axis: Mapped[str | None] = mapped_column(String(32), nullable=True)
    key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    rows: Mapped[int] = mapped_column(Integer, default=0)
    lineage_rows: Mapped[int] = mapped_column(Integer, default=0)


class DataMigrationRow(Base):
    """A data migration a schema revision asked for (the leaderboard's rows of jobs run before
    0007), done in batches after the schema upgrade (service/upgrades.py): how far it is (the
    last job done, by finishing time and id), how much there is, and when it ended. Each batch
    commits its rows with this row's progress, so one interrupted resumes where it stopped."""

    __tablename__ = "data_migrations"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    total: Mapped[int] = mapped_column(BigInteger)  # jobs to go through, counted when it was asked for
    done: Mapped[int] = mapped_column(BigInteger)  # jobs gone through (filled or skipped)
    filled: Mapped[int] = mapped_column(BigInteger)  # of those, the jobs given rows
    after_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)  # the last job done: its finish
    after_id: Mapped[str | None] = mapped_column(String(32), nullable=True)  # ... and its id
    until_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)  # the last job it covers
    until_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)  # None: still to do
