"""The spend ledger: each request's price is reserved in the database before it leaves and
settled by its bill (``spend``, one row per request or batch submission), so a run's spend
survives kills, timeouts and resumes. A run's calls stored before it are one settled row.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spend",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("provider_batch_id", sa.Integer(), nullable=True),
        sa.Column("usd", sa.Float(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("settled", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["provider_batch_id"], ["provider_batch.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_spend_run_id", "spend", ["run_id"])
    call = sa.table(
        "call",
        sa.column("run_id", sa.Integer()),
        sa.column("cost_usd", sa.Float()),
        sa.column("input_tokens", sa.Integer()),
        sa.column("output_tokens", sa.Integer()),
        sa.column("cached_from", sa.Integer()),
    )
    spend = sa.table(
        "spend",
        sa.column("run_id", sa.Integer()),
        sa.column("usd", sa.Float()),
        sa.column("input_tokens", sa.BigInteger()),
        sa.column("output_tokens", sa.BigInteger()),
        sa.column("settled", sa.Boolean()),
    )
    paid = (
        sa.select(
            call.c.run_id,
            sa.func.sum(call.c.cost_usd),
            sa.func.max(call.c.input_tokens),
            sa.func.max(call.c.output_tokens),
            sa.true(),
        )
        .where(call.c.cached_from.is_(None))
        .group_by(call.c.run_id)
    )
    columns = ["run_id", "usd", "input_tokens", "output_tokens", "settled"]
    op.execute(spend.insert().from_select(columns, paid))


def downgrade() -> None:
    op.drop_table("spend")
