"""endpoints.tokenizer may be null (#37): a served model registered without a tokenizer
folder counts its prompts with its server's /tokenize and /detokenize (vLLM, SGLang).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("endpoints") as batch:
        batch.alter_column("tokenizer", existing_type=sa.Text(), nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("endpoints") as batch:
        batch.alter_column("tokenizer", existing_type=sa.Text(), nullable=False)
