"""Schedules and the submissions they made (one per checkpoint and suite). Methods return detached rows."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from service.core.errors import Conflict
from service.store.db import Database, retried
from service.store.models import JobRow, ScheduleRow, SubmissionRow


class ScheduleAccess(Database):
    """The store's access to schedules: add, list, delete, the ticks due and claimed once."""

    def add_schedule(self, row: ScheduleRow) -> ScheduleRow:
        try:
            with self.writing() as s:
                s.add(row)
        except IntegrityError as e:
            raise Conflict(f"a schedule named {row.name!r} exists; delete it first or pick another name") from e
        return row

    def get_schedule(self, name: str) -> ScheduleRow:
        return self.named(ScheduleRow, "schedule", name)

    def find_schedule(self, name: str) -> ScheduleRow | None:
        with self.reading() as s:
            return s.get(ScheduleRow, name)

    @retried
    def list_schedules(self) -> list[ScheduleRow]:
        return self.all_named(ScheduleRow)

    def delete_schedule(self, name: str) -> None:
        self.delete_named(ScheduleRow, "schedule", name)

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

    @retried
    def submitted_job(self, fingerprint: str, suite_hash: str) -> JobRow | None:
        """The job a schedule submitted for this checkpoint fingerprint and suite, if any."""
        with self.reading() as s:
            return s.scalars(select(JobRow).join(SubmissionRow, SubmissionRow.job_id == JobRow.id)
                             .where(SubmissionRow.fingerprint == fingerprint,
                                    SubmissionRow.suite_hash == suite_hash)).first()
