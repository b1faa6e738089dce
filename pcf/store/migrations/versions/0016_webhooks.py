"""The webhooks' tables: the subscriptions (``webhook``), the outbox of events to send to them
(``webhook_delivery``) and each attempt to send one (``webhook_attempt``).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", sa.String(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("webhook_id", sa.Integer(), nullable=False),
        sa.Column("message_id", sa.String(), nullable=False),
        sa.Column("event", sa.String(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhook.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("message_id"),
    )
    op.create_index("ix_webhook_delivery_webhook_id", "webhook_delivery", ["webhook_id"])
    op.create_index("ix_webhook_delivery_due", "webhook_delivery", ["state", "next_attempt_at"])
    op.create_table(
        "webhook_attempt",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["delivery_id"], ["webhook_delivery.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_attempt_delivery_id", "webhook_attempt", ["delivery_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_attempt_delivery_id", table_name="webhook_attempt")
    op.drop_table("webhook_attempt")
    op.drop_index("ix_webhook_delivery_due", table_name="webhook_delivery")
    op.drop_index("ix_webhook_delivery_webhook_id", table_name="webhook_delivery")
    op.drop_table("webhook_delivery")
    op.drop_table("webhook")
