"""Assignments: items given to one annotator, served to them first and to nobody else until
they label them (``assignment``, one row per assigned item).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "assignment",
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("annotator", sa.String(), nullable=False),
        sa.Column("assigned_by", sa.String(), nullable=False),
        sa.Column("assigned_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["item.id"]),
        sa.PrimaryKeyConstraint("item_id"),
    )
    op.create_index("ix_assignment_annotator", "assignment", ["annotator"])


def downgrade() -> None:
    op.drop_table("assignment")
