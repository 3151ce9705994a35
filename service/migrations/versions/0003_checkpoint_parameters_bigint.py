"""checkpoints.parameters as a 64-bit integer: an 8B-parameter model overflows PostgreSQL's
32-bit INTEGER (SQLite's INTEGER was already 64-bit; the type change is recorded for both).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.alter_column("parameters", existing_type=sa.Integer(), type_=sa.BigInteger(), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.alter_column("parameters", existing_type=sa.BigInteger(), type_=sa.Integer(), existing_nullable=False)
