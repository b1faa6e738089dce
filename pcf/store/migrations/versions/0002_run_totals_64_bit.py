"""A run's token totals are 64-bit: a long run can pass PostgreSQL's 32-bit INTEGER.

On SQLite an INTEGER already holds 64 bits; the declared type changes there too (the table is
rebuilt with every row), so that every database matches the models.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TOTALS = ("input_tokens", "output_tokens")


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        for name in TOTALS:
            batch.alter_column(name, type_=sa.BigInteger(), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        for name in TOTALS:
            batch.alter_column(name, type_=sa.Integer(), existing_nullable=False)
