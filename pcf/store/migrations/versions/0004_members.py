"""Members and roles (who may sign in, and as what) and the audit log of their actions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "member",
        sa.Column("email", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("local", sa.Boolean(), nullable=False),
        sa.Column("added_by", sa.String(), nullable=False),
        sa.Column("added_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("email"),
    )
    op.create_table(
        "audit_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_event_actor", "audit_event", ["actor"])


def downgrade() -> None:
    op.drop_table("audit_event")
    op.drop_table("member")
