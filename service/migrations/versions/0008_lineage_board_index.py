"""One lineage's leaderboard read in its order: an index on the view, the current flag and the
lineage, then the board's order (unranked, rank, checkpoint, setting), so a page of 50 of a
lineage's rows is a range read that stops at 50, not every row of the lineage read and sorted
(#52: the one-lineage view grew with the lineage's size).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

COLUMNS = ["task", "current", "lineage", "unranked", "rank", "checkpoint", "setting"]


def upgrade() -> None:
    op.create_index("ix_task_results_lineage_rank", "task_results", COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_task_results_lineage_rank", table_name="task_results")
