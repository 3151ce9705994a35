"""Replicas (#27): one row per running server that executes jobs (its replica id, host,
pid, home, a per-process instance token and a heartbeat), so a second server claiming a
live replica's id is refused instead of requeueing that replica's running jobs; and an
index on (owner, finished_at) for the API's job-duration metrics, read from the store now
that jobs end in the dispatcher process.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("instance", sa.String(32), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("home", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_jobs_owner_finished", "jobs", ["owner", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_finished", table_name="jobs")
    op.drop_table("replicas")
