"""Key claims: a request being answered by one run is not sent again by another run with the
same content key; the other waits for the answer (``key_claim``, one row per key in flight).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "key_claim",
        sa.Column("content_key", sa.String(), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("content_key"),
    )
    op.create_index("ix_key_claim_holder", "key_claim", ["holder"])


def downgrade() -> None:
    op.drop_table("key_claim")
