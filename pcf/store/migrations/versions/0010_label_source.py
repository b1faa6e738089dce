"""A label's source: the file or tool an imported label came from (``pcf labels import``);
empty for the labels saved in PCF.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("adjudication", sa.Column("source", sa.String(), nullable=True))


def downgrade() -> None:
    # Not a batch: rebuilding the table would lose the chain index, an expression index that
    # SQLite cannot reflect (SQLite 3.35 and later drop a column in place).
    op.drop_column("adjudication", "source")
