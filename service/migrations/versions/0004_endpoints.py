"""Endpoints (#28): served models registered like checkpoints (the `endpoints` table, no
API key in it: only the name of the environment variable holding one), and the endpoint a
job runs on (`jobs.endpoint`, null for a job on a checkpoint).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "endpoints",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=False),
        sa.Column("served_model", sa.String(512), nullable=False),
        sa.Column("api_style", sa.String(16), nullable=False),
        sa.Column("tokenizer", sa.Text(), nullable=False),
        sa.Column("context_length", sa.Integer(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("timeout_s", sa.Float(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("api_key_env", sa.String(128), nullable=True),
        sa.Column("capabilities", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("endpoint", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("endpoint")
    op.drop_table("endpoints")
