"""The leaderboard stored (#52): a job's tasks in `job_tasks` (an index, not a LIKE over
`task_names`); jobs per final status and the samples they scored in `job_counts` (what
/metrics reads); per succeeded job and task view its leaderboard row (`task_results`), its
columns (`result_values`) and each view's column catalog (`result_columns`); the job list's
order (created_at, id) indexed.

Existing jobs are filled in: their tasks and counts from their rows, their leaderboard rows
from their results.json (a data migration, service/upgrades.py: registered by the migrations'
env.py once the newest revision is reached, run after the schema upgrade in committed batches
with its progress shown, by the code that writes the newest layout's rows; a job whose results
are gone is skipped and logged).

Revision ID: 0007
Revises: 0006
Create Date: 2027-01-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

FINAL = ("succeeded", "failed", "cancelled")


def upgrade() -> None:
    op.create_table(
        "job_tasks",
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("task", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "task"),
    )
    op.create_index("ix_job_tasks_task", "job_tasks", ["task", "job_id"])
    op.create_table(
        "job_counts",
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("status"),
    )
    op.create_table(
        "task_results",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("checkpoint", sa.String(128), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("lineage", sa.String(1024), nullable=True),
        sa.Column("schedule", sa.String(128), nullable=True),
        sa.Column("rope", sa.String(128), nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("thinking", sa.String(32), nullable=True),
        sa.Column("data_revision", sa.String(64), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("setting", sa.String(1024), nullable=False),
        sa.Column("setting_key", sa.String(40), nullable=False),
        sa.Column("lineage_key", sa.String(40), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=False),
        sa.Column("trained_context", sa.Integer(), nullable=True),
        sa.Column("beyond_context", sa.JSON(), nullable=False),
        sa.Column("headline", sa.String(200), nullable=True),
        sa.Column("unranked", sa.Boolean(), nullable=False),
        sa.Column("rank", sa.Float(), nullable=True),
        sa.Column("current", sa.Boolean(), nullable=False),
        sa.Column("lineage_current", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    for name, columns in {
        "board": ["task", "current", "unranked", "rank", "checkpoint", "setting"],
        "lineage_board": ["task", "lineage_current", "unranked", "rank", "checkpoint", "setting"],
        "newest": ["task", "current", "finished_at"],
        "job": ["job_id", "task"],
        "setting": ["task", "setting_key", "current", "finished_at"],
        "lineage_key": ["task", "lineage_key", "lineage_current", "finished_at"],
        "lineage": ["task", "current", "lineage", "finished_at"],
        "lineage_runs": ["task", "lineage_current", "lineage", "finished_at"],
        "checkpoint": ["task", "current", "checkpoint", "finished_at"],
        "schedule": ["task", "current", "schedule", "finished_at"],
    }.items():
        op.create_index(f"ix_task_results_{name}", "task_results", columns)
    op.create_index("ix_jobs_created", "jobs", ["created_at", "id"])  # the job list's order, newest first
    op.create_table(
        "result_values",
        sa.Column("result_id", sa.Integer(), sa.ForeignKey("task_results.id", ondelete="CASCADE"), nullable=False),
        sa.Column("column", sa.String(200), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("result_id", "column"),
    )
    op.create_table(
        "result_columns",
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("higher_is_better", sa.Boolean(), nullable=True),
        sa.Column("unit", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("series", sa.String(200), nullable=True),
        sa.Column("axis", sa.String(32), nullable=True),
        sa.Column("key", sa.String(200), nullable=True),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("lineage_rows", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("task", "name"),
    )
    _fill()


def _fill() -> None:
    """Existing jobs' tasks and counts (inserted in batches); their leaderboard rows are asked of
    service/upgrades.py, which fills them after the schema upgrade in committed batches."""
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("task_names", sa.Text),
                    sa.column("status", sa.String), sa.column("progress", sa.JSON))
    tasks = sa.table("job_tasks", sa.column("job_id", sa.String), sa.column("task", sa.String))
    counts = {status: [0, 0] for status in FINAL}
    pending: list[dict[str, str]] = []
    for row in conn.execute(sa.select(jobs)):
        pending += [{"job_id": row.id, "task": t} for t in dict.fromkeys((row.task_names or "").split(",")) if t]
        if row.status in counts:
            counts[row.status][0] += 1
            counts[row.status][1] += sum(int(p.get("done", 0)) for p in (row.progress or {}).values()
                                         if isinstance(p, dict))
    for i in range(0, len(pending), 5000):
        conn.execute(sa.insert(tasks), pending[i:i + 5000])
    table = sa.table("job_counts", sa.column("status", sa.String), sa.column("jobs", sa.BigInteger),
                     sa.column("samples", sa.BigInteger))
    conn.execute(sa.insert(table), [{"status": s, "jobs": n, "samples": k} for s, (n, k) in counts.items()])
    # the leaderboard's rows of the succeeded jobs: a data migration, done once the newest revision is
    # reached (service/migrations/env.py registers it) by the code that writes the newest layout's rows
    context.config.attributes.setdefault("data_migrations", []).append("leaderboard")


def downgrade() -> None:
    op.drop_index("ix_jobs_created", table_name="jobs")
    for name in ("result_columns", "result_values", "task_results", "job_counts", "job_tasks"):
        op.drop_table(name)
