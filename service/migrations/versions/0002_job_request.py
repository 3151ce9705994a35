"""A job keeps its request whole: the suite (tasks, rope, backend, priority and any field the
request model gains) as one JSON column, beside the columns the store filters and orders on
(checkpoint, status, priority, task_names). Existing jobs get their request from the columns
it replaces (tasks, rope, backend, priority), which are then dropped.

Columns are dropped with ALTER TABLE ... DROP COLUMN (SQLite 3.35+, PostgreSQL), not by
copying the table: a copy would drop the old jobs table, and with foreign keys on SQLite
that deletes the schedule submissions that point at it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

MOVED = ("tasks", "rope", "backend")


def _jobs(*names: str) -> sa.TableClause:
    types = {"id": sa.String(32), "request": sa.JSON(), "tasks": sa.JSON(), "rope": sa.JSON(),
             "backend": sa.String(16), "priority": sa.Integer()}
    return sa.table("jobs", *(sa.column(n, types[n]) for n in names))


def upgrade() -> None:
    op.add_column("jobs", sa.Column("request", sa.JSON(), nullable=False, server_default="{}"))
    conn = op.get_bind()
    old = _jobs("id", "tasks", "rope", "backend", "priority")
    new = _jobs("id", "request")
    for row in conn.execute(sa.select(old)).mappings().all():
        request = {"tasks": row["tasks"], "rope": row["rope"], "backend": row["backend"], "priority": row["priority"]}
        conn.execute(sa.update(new).where(new.c.id == row["id"]).values(request=request))
    for name in MOVED:
        op.drop_column("jobs", name)


def downgrade() -> None:
    op.add_column("jobs", sa.Column("tasks", sa.JSON(), nullable=False, server_default="[]"))
    op.add_column("jobs", sa.Column("rope", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("backend", sa.String(16), nullable=False, server_default="auto"))
    conn = op.get_bind()
    new = _jobs("id", "request")
    old = _jobs("id", "tasks", "rope", "backend")
    for row in conn.execute(sa.select(new)).mappings().all():
        request = row["request"] or {}
        conn.execute(sa.update(old).where(old.c.id == row["id"]).values(
            tasks=request.get("tasks", []), rope=request.get("rope"), backend=request.get("backend", "auto")))
    op.drop_column("jobs", "request")
