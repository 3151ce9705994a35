"""Request and response models of the API, shared with the CLI client."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from checkpoints.attention.backend import Backend as AttentionBackend

# Patterns of text that reaches the database (PostgreSQL refuses NUL characters in text).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
TASK_PATTERN = r"^[A-Za-z0-9_.#/-]{1,64}$"
NO_NUL_PATTERN = r"^[^\x00]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN,
                            description="letters, digits, '_', '.', '-'; at most 128 characters")]
Backend = Literal[tuple(b.value for b in AttentionBackend)]
Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
Rope = Annotated[str | dict[str, Any] | None, Field(
    description="RoPE override: 'yarn:4', 'ntk:8', 'none', or a dict such as {'rope_type': 'yarn', 'factor': 4}")]


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    @field_serializer("*", when_used="json-unless-none")
    def _utc(self, value: Any) -> Any:
        """Stored timestamps are naive UTC; answer with the zone spelled out."""
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC).isoformat()
        return value


class ErrorOut(BaseModel):
    detail: str | list[Any]
    code: str = "invalid"


class TaskSpec(BaseModel):
    """One evaluation task and its options; options beyond these are passed to the
    evaluator, which validates them."""

    model_config = ConfigDict(extra="allow")

    name: Annotated[str, Field(pattern=TASK_PATTERN, examples=["passkey"])]
    lengths: list[Annotated[int, Field(gt=0, le=10_000_000)]] | None = Field(None, examples=[[256, 512, 1024]])
    datasets: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(None, examples=[["qasper"]])
    trials: Annotated[int, Field(gt=0, le=100_000)] | None = None
    seed: int | None = None

    def options(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class Suite(BaseModel):
    """What a job runs: shared by jobs and schedules."""

    tasks: Annotated[list[TaskSpec], Field(min_length=1, max_length=64)]
    rope: Rope = None
    backend: Backend = "auto"
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0


class JobCreate(Suite):
    checkpoint: Annotated[str, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN,
                                     description="registered checkpoint name, or a path inside the checkpoint roots")]

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "checkpoint": "demo-tda",
        "tasks": [{"name": "passkey", "lengths": [256, 512, 1024], "trials": 100},
                  {"name": "longbench", "datasets": ["qasper", "hotpotqa"]}],
        "rope": "yarn:4", "backend": "auto"}]})


class TaskProgress(BaseModel):
    done: int = 0
    total: int = 0


class JobOut(_Out):
    id: str
    checkpoint: str
    checkpoint_path: str
    fingerprint: str
    tasks: list[dict[str, Any]]
    rope: str | dict[str, Any] | None
    backend: str
    priority: int
    status: Status
    progress: dict[str, TaskProgress]
    error: str | None
    attempts: int
    schedule: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None


class JobList(BaseModel):
    items: list[JobOut]
    total: int
    limit: int
    offset: int


class CheckpointCreate(BaseModel):
    name: Name
    path: Annotated[str, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN, examples=["/models/demo-tda"])]


class CheckpointOut(_Out):
    name: str
    path: str
    fingerprint: str
    variant: str
    parameters: int
    created_at: datetime


class ScheduleCreate(BaseModel):
    name: Name
    cron: Annotated[str, Field(min_length=1, max_length=128, examples=["0 2 * * *"])]
    watch: Annotated[list[Annotated[str, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN)]],
                     Field(min_length=1, max_length=32)]
    suite: Suite


class ScheduleOut(_Out):
    name: str
    cron: str
    watch: list[str]
    suite: dict[str, Any]
    next_run_at: datetime
    last_run_at: datetime | None
    created_at: datetime


class LeaderboardRow(_Out):
    checkpoint: str
    fingerprint: str
    job: str
    finished_at: datetime | None
    values: dict[str, float | None]


class Leaderboard(BaseModel):
    task: str
    columns: list[str]
    rows: list[LeaderboardRow]
