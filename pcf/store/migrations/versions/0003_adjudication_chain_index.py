"""One successor per label: a unique index on (item, annotator, the label it supersedes).

Until this revision the index was added at engine start and left out where two racing saves
had already forked an annotator's history. Here a forked history is first made a line again:
that annotator's labels of the item are chained in the order they were saved (time, then id),
which is the order that decides their current label, so no label changes and none is lost.
A database whose release already made the index keeps it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

adjudication = sa.table(
    "adjudication",
    sa.column("id", sa.Integer()),
    sa.column("item_id", sa.Integer()),
    sa.column("annotator", sa.String()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("supersedes", sa.Integer()),
)


def upgrade() -> None:
    connection = op.get_bind()
    link = sa.func.coalesce(adjudication.c.supersedes, 0)
    forked = connection.execute(
        sa.select(adjudication.c.item_id, adjudication.c.annotator)
        .group_by(adjudication.c.item_id, adjudication.c.annotator, link)
        .having(sa.func.count() > 1)
        .distinct()
    ).all()
    for item_id, annotator in forked:
        labels = connection.execute(
            sa.select(adjudication.c.id)
            .where(adjudication.c.item_id == item_id, adjudication.c.annotator == annotator)
            .order_by(adjudication.c.created_at, adjudication.c.id)
        ).scalars()
        previous = None
        for label_id in labels.all():
            connection.execute(
                sa.update(adjudication)
                .where(adjudication.c.id == label_id)
                .values(supersedes=previous)
            )
            previous = label_id
    op.create_index(
        "ux_adjudication_chain",
        "adjudication",
        ["item_id", "annotator", sa.text("coalesce(supersedes, 0)")],
        unique=True,
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ux_adjudication_chain", table_name="adjudication")
