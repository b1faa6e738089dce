"""Team labelling: a labelling plan per dataset, item reservations, reviewers' resolutions.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "labelling_plan",
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("labels_per_item", sa.Integer(), nullable=False),
        sa.Column("adaptive", sa.Boolean(), nullable=False),
        sa.Column("gold_rule", sa.String(), nullable=False),
        sa.Column("guidelines", sa.String(), nullable=False),
        sa.Column("updated_by", sa.String(), nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["dataset.id"]),
        sa.PrimaryKeyConstraint("dataset_id"),
    )
    op.create_table(
        "reservation",
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("annotator", sa.String(), nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["item.id"]),
        sa.PrimaryKeyConstraint("item_id", "annotator"),
    )
    op.create_table(
        "resolution",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("choice", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("resolved_by", sa.String(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["item.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_resolution_item_id", "resolution", ["item_id"])


def downgrade() -> None:
    op.drop_table("resolution")
    op.drop_table("reservation")
    op.drop_table("labelling_plan")
