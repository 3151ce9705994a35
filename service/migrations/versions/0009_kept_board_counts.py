"""The leaderboard's pages flat in the history's size (#52: the counts, filters and sorts grew
with the rows they matched):

- `board_counts`: per task view and flag (`current`, `lineage_current`) how many rows hold it,
  in the whole view and per value of each fixed filter (lineage, schedule, rope, backend,
  thinking), and per column how many of those rows have it: a page's `total` and columns are
  read, not counted.
- `result_values` carries its row's task, `current` flag, checkpoint and setting and its rank
  (the value, negated where the catalog says higher is better), indexed so a board sorted by
  any column is an index walk that stops at its page.
- indexes on the RoPE, backend and schedule of the current rows in the board's order: a
  filtered page is a range read.
- `job_task_counts`: jobs of a task per final status, as `job_counts` keeps them for all jobs.

Existing rows are filled in from the tables (no results files read): an upgraded service
keeps its history.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FINAL = ("succeeded", "failed", "cancelled")
DIMENSIONS = ("lineage", "schedule", "rope", "backend", "thinking")
RANKED = ["unranked", "rank", "checkpoint", "setting"]
VALUE_COLUMNS = [("task", sa.String(200)), ("current", sa.Boolean()), ("unranked", sa.Boolean()),
                 ("rank", sa.Float()), ("checkpoint", sa.String(128)), ("setting", sa.String(1024))]


def upgrade() -> None:
    op.create_table(
        "board_counts",
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("flag", sa.String(16), nullable=False),
        sa.Column("dimension", sa.String(16), nullable=False),
        sa.Column("value", sa.String(1024), nullable=False),
        sa.Column("column", sa.String(200), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("task", "flag", "dimension", "value", "column"),
    )
    op.create_table(
        "job_task_counts",
        sa.Column("task", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("task", "status"),
    )
    with op.batch_alter_table("result_values") as batch:
        for name, kind in VALUE_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    for name in ("rope", "backend", "schedule"):
        op.create_index(f"ix_task_results_{name}_rank", "task_results", ["task", "current", name, *RANKED])
    _fill()
    op.create_index("ix_result_values_board", "result_values",
                    ["task", "column", "current", *RANKED, "result_id"])


def _fill() -> None:
    conn = op.get_bind()
    conn.execute(sa.text(
        "UPDATE result_values SET task = (SELECT t.task FROM task_results t WHERE t.id = result_id), "
        "current = (SELECT t.current FROM task_results t WHERE t.id = result_id), "
        "checkpoint = (SELECT t.checkpoint FROM task_results t WHERE t.id = result_id), "
        "setting = (SELECT t.setting FROM task_results t WHERE t.id = result_id), "
        "unranked = (value IS NULL)"))
    conn.execute(sa.text(
        'UPDATE result_values SET rank = CASE WHEN value IS NULL THEN NULL WHEN (SELECT c.higher_is_better '
        'FROM result_columns c WHERE c.task = result_values.task AND c.name = result_values."column") = :no '
        "THEN value ELSE -value END").bindparams(no=False))
    for flag in ("current", "lineage_current"):
        for dimension in ("", *DIMENSIONS):
            value = f"t.{dimension}" if dimension else "''"
            where = f"t.{flag} = :yes" + (f" AND t.{dimension} IS NOT NULL" if dimension else "")
            group = ", " + value if dimension else ""
            conn.execute(sa.text(
                'INSERT INTO board_counts (task, flag, dimension, value, "column", rows) '
                f"SELECT t.task, :flag, :dimension, {value}, '', count(*) FROM task_results t WHERE {where} "
                f"GROUP BY t.task{group}").bindparams(flag=flag, dimension=dimension, yes=True))
            conn.execute(sa.text(
                'INSERT INTO board_counts (task, flag, dimension, value, "column", rows) '
                f'SELECT t.task, :flag, :dimension, {value}, v."column", count(*) FROM task_results t '
                f'JOIN result_values v ON v.result_id = t.id WHERE {where} GROUP BY t.task{group}, v."column"')
                .bindparams(flag=flag, dimension=dimension, yes=True))
    conn.execute(sa.text(
        "INSERT INTO job_task_counts (task, status, jobs) SELECT jt.task, j.status, count(*) FROM job_tasks jt "
        "JOIN jobs j ON j.id = jt.job_id WHERE j.status IN ('succeeded', 'failed', 'cancelled') "
        "GROUP BY jt.task, j.status"))


def downgrade() -> None:
    op.drop_index("ix_result_values_board", table_name="result_values")
    for name in ("rope", "backend", "schedule"):
        op.drop_index(f"ix_task_results_{name}_rank", table_name="task_results")
    with op.batch_alter_table("result_values") as batch:
        for name, _ in reversed(VALUE_COLUMNS):
            batch.drop_column(name)
    op.drop_table("job_task_counts")
    op.drop_table("board_counts")
