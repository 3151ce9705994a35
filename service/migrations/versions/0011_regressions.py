"""Nightly regressions (#57): the `regressions` table (a drop of one column of one task view
between a lineage's new checkpoint and the previous one, or a pinned baseline, whose paired 95%
interval excludes zero and which is beyond the schedule's threshold) and what a schedule watches
its jobs for (`schedules.alerts`: threshold, pinned baseline, webhooks); each stored leaderboard
value's standard error (`result_values.stderr`, None for rows stored before); an index for a
checkpoint's newest row of a task (the dry run's earlier spread). Nothing to fill in:
regressions are found, and errors stored, as jobs finish from now on.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("schedules", sa.Column("alerts", sa.JSON(), nullable=True))
    op.add_column("result_values", sa.Column("stderr", sa.Float(), nullable=True))
    op.create_table(
        "regressions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("baseline_job_id", sa.String(32), nullable=False),
        sa.Column("against", sa.String(16), nullable=False),
        sa.Column("schedule", sa.String(128), nullable=True),
        sa.Column("lineage", sa.String(1024), nullable=True),
        sa.Column("checkpoint", sa.String(128), nullable=False),
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("column", sa.String(200), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("baseline_value", sa.Float(), nullable=False),
        sa.Column("difference", sa.Float(), nullable=False),
        sa.Column("low", sa.Float(), nullable=False),
        sa.Column("high", sa.Float(), nullable=False),
        sa.Column("paired", sa.Boolean(), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("job_id", "baseline_job_id", "task", "column", name="uq_regression"),
    )
    op.create_index("ix_regressions_created", "regressions", ["created_at"])
    op.create_index("ix_regressions_job", "regressions", ["job_id"])
    # a checkpoint's newest row of a task: the dry run's earlier spread (service/resolution.py)
    op.create_index("ix_task_results_fingerprint", "task_results", ["task", "fingerprint", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_task_results_fingerprint", "task_results")
    op.drop_index("ix_regressions_job", "regressions")
    op.drop_index("ix_regressions_created", "regressions")
    op.drop_table("regressions")
    op.drop_column("result_values", "stderr")
    op.drop_column("schedules", "alerts")
