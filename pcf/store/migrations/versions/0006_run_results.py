"""Run results: a run's derived results (decision table, packed judgments, figures against
labels) kept per revision of its calls, so that pages read them instead of recomputing them;
and an index of the items by position, to read a large dataset a chunk at a time.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "run_result",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("revision", sa.String(), nullable=False),
        sa.Column("computed_at", TIME, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.PrimaryKeyConstraint("run_id", "name"),
    )
    op.create_index("ix_item_dataset_position", "item", ["dataset_id", "position"])


def downgrade() -> None:
    op.drop_index("ix_item_dataset_position", table_name="item")
    op.drop_table("run_result")
