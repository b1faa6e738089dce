"""Databases made by the last release before migrations (commit f9302a1), for upgrade tests.

``make.py`` built them once with that release's own code; :func:`restore` loads one into a
test's database: the SQLite file, or on PostgreSQL the ``pg_dump`` of the database that code
made there. ``decisions.json.xz`` holds each run's decisions as that release exported them.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

from sqlalchemy import create_engine, make_url
from sqlalchemy.pool import NullPool

RELEASE = "f9302a1"
FOLDER = Path(__file__).parent
SQLITE_FILE = FOLDER / f"{RELEASE}.sqlite.xz"
POSTGRES_FILE = FOLDER / f"{RELEASE}.postgres.sql.xz"
DECISIONS_FILE = FOLDER / f"{RELEASE}.decisions.json.xz"


def restore(url: str) -> None:
    """Replace the empty database at ``url`` by the release's database."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        Path(parsed.database).write_bytes(lzma.decompress(SQLITE_FILE.read_bytes()))
        return
    dump = lzma.decompress(POSTGRES_FILE.read_bytes()).decode("utf-8")
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        driver.execute(dump)  # many statements: psycopg sends them at once without parameters
        driver.commit()
    engine.dispose()


def release_decisions() -> dict[str, list[dict]]:
    """Each run's ``decisions.jsonl`` records as the release exported them, by run name."""
    return json.loads(lzma.decompress(DECISIONS_FILE.read_bytes()))
