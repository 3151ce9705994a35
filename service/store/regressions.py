"""Nightly regressions (service/regressions.py finds them) and the previous run of a lineage
they are found against. Methods return detached rows."""

from __future__ import annotations

from sqlalchemy import and_, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import aliased

from service.store.db import Database, retried
from service.store.models import RegressionRow, TaskResultRow


class RegressionAccess(Database):
    """The store's access to regressions: add (once per job, baseline, task and column), list
    newest first, and the job a lineage ran before a given one."""

    @retried
    def previous_in_lineage(self, job_id: str, task: str) -> str | None:
        """The job whose stored row of `task` is the newest before `job_id`'s with the same lineage
        key (the checkpoint's folder, RoPE, backend, scoring options, data): the lineage's previous
        checkpoint under the same setting. None: the first of its lineage."""
        me, other = aliased(TaskResultRow), aliased(TaskResultRow)
        with self.reading() as s:
            return s.scalar(
                select(other.job_id).join(me, and_(me.lineage_key == other.lineage_key, me.task == other.task))
                .where(me.job_id == job_id, me.task == task, other.job_id != job_id,
                       or_(other.finished_at < me.finished_at,
                           and_(other.finished_at == me.finished_at, other.id < me.id)))
                .order_by(other.finished_at.desc(), other.id.desc()).limit(1))

    @retried
    def latest_job_with(self, fingerprint: str, task: str) -> str | None:
        """The newest succeeded job of a checkpoint with a stored row of `task` (the dry run's
        variance comes from it)."""
        with self.reading() as s:
            return s.scalar(select(TaskResultRow.job_id).where(TaskResultRow.fingerprint == fingerprint,
                                                               TaskResultRow.task == task)
                            .order_by(TaskResultRow.finished_at.desc(), TaskResultRow.id.desc()).limit(1))

    def add_regressions(self, rows: list[RegressionRow]) -> list[RegressionRow]:
        """Store `rows`; one already stored (the same job, baseline, task and column: a check run
        twice) is kept as it was. Returns the rows new to the store."""
        added = []
        with self.writing() as s:
            dialect = s.get_bind().dialect.name
            insert = pg_insert if dialect == "postgresql" else sqlite_insert
            for row in rows:
                values = {c.name: getattr(row, c.name) for c in RegressionRow.__table__.columns if c.name != "id"}
                res = s.execute(insert(RegressionRow).values(**values).on_conflict_do_nothing(
                    index_elements=["job_id", "baseline_job_id", "task", "column"]).returning(RegressionRow.id))
                if res.first() is not None:  # inserted (rowcount is not reliable across drivers here)
                    added.append(row)
        return added

    @retried
    def list_regressions(self, schedule: str | None = None, lineage: str | None = None, task: str | None = None,
                         job: str | None = None, limit: int = 50, offset: int = 0) -> list[RegressionRow]:
        where = [c for c in (RegressionRow.schedule == schedule if schedule else None,
                             RegressionRow.lineage == lineage if lineage else None,
                             RegressionRow.task == task if task else None,
                             RegressionRow.job_id == job if job else None) if c is not None]
        with self.reading() as s:
            return list(s.scalars(select(RegressionRow).where(*where)
                                  .order_by(RegressionRow.created_at.desc(), RegressionRow.id.desc())
                                  .limit(limit).offset(offset)))
