"""Job statuses: one enum the store, the API schemas and the CLI share. Kept free of
heavy imports (the CLI's client commands import it). The stored values are the strings."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The members under short names, as the store and the executor spell them.
QUEUED, RUNNING, SUCCEEDED = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED
FAILED, CANCELLED = JobStatus.FAILED, JobStatus.CANCELLED
FINAL = (SUCCEEDED, FAILED, CANCELLED)  # a job in one of these never changes again

# A job's `owner` (the replica that ran it) when it ran outside the service and `lctx upload` recorded it.
UPLOADED = "uploaded"
