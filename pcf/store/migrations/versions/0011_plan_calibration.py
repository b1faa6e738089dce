"""A labelling plan's random calibration share (served first, regardless of doubt) and the
items ``pcf escalate --queue`` sent to the queue.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("labelling_plan") as batch:
        batch.add_column(
            sa.Column("calibration_share", sa.Float(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("escalated", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("labelling_plan") as batch:
        batch.alter_column("calibration_share", server_default=None)
        batch.alter_column("escalated", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("labelling_plan") as batch:
        batch.drop_column("escalated")
        batch.drop_column("calibration_share")
