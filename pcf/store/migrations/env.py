"""Alembic's environment: migrations run on the connection :mod:`pcf.store.schema` hands in.

That module takes the lock (PostgreSQL's advisory lock, SQLite's write lock) before it calls
Alembic, so this file only configures the migration context. On PostgreSQL each revision is a
transaction of its own, so a failed or killed upgrade stops at the revision before it; SQLite
runs every revision in the one transaction the caller holds.
"""

from __future__ import annotations

from alembic import context

from pcf.store.models import SQLModel

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    transaction_per_migration=connection.dialect.name != "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
