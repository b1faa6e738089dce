"""A member's provider account: the issuer and subject of their first sign-in, which alone may
sign in as them afterwards (empty until then).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("member", sa.Column("issuer", sa.String(), nullable=True))
    op.add_column("member", sa.Column("subject", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("member") as batch:
        batch.drop_column("subject")
        batch.drop_column("issuer")
