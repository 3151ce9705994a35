"""Data migrations in batches (#61): `data_migrations` keeps how far each data migration a
revision asked for has gone (0007's leaderboard rows of the jobs run before it), so it is done
after the schema upgrade in committed batches, with its progress shown (/healthz, the log),
and one interrupted resumes where it stopped (service/upgrades.py). The jobs are gone through
in their finishing order: `ix_jobs_finished` makes each batch a range read.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "data_migrations",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("done", sa.BigInteger(), nullable=False),
        sa.Column("filled", sa.BigInteger(), nullable=False),
        sa.Column("after_at", sa.DateTime(), nullable=True),
        sa.Column("after_id", sa.String(32), nullable=True),
        sa.Column("until_at", sa.DateTime(), nullable=True),
        sa.Column("until_id", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_index("ix_jobs_finished", "jobs", ["status", "finished_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_finished", table_name="jobs")
    op.drop_table("data_migrations")
