"""The HTTP API's tables: its tokens (``api_token``, only a digest of each secret) and the runs
it started (``api_run``, one per member and idempotency key, resumed after a restart) and
the labels posted to it (``api_label``, one per member and client label id).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("email", sa.String(), nullable=False),
        sa.Column("scope", sa.String(), nullable=False),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("prefix", sa.String(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    op.create_index("ix_api_token_email", "api_token", ["email"])
    op.create_table(
        "api_run",
        sa.Column("run_name", sa.String(), nullable=False),
        sa.Column("email", sa.String(), nullable=False),
        sa.Column("idempotency_key", sa.String(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("cancelled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_name"),
        sa.UniqueConstraint("email", "idempotency_key"),
    )
    op.create_table(
        "api_label",
        sa.Column("email", sa.String(), nullable=False),
        sa.Column("label_id", sa.String(), nullable=False),
        sa.Column("adjudication_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["adjudication_id"], ["adjudication.id"]),
        sa.PrimaryKeyConstraint("email", "label_id"),
    )


def downgrade() -> None:
    op.drop_table("api_label")
    op.drop_table("api_run")
    op.drop_index("ix_api_token_email", table_name="api_token")
    op.drop_table("api_token")
