"""The store's tables (SQLAlchemy rows; their migrations are in service/migrations/) and the
one clock every timestamp is stored by."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

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
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from service.status import QUEUED


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
