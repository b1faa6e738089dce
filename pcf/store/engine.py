"""The one engine factory, the database location, and the transaction scope."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, make_url
from sqlmodel import Session, SQLModel, create_engine

from pcf.store import models  # noqa: F401 - registers the tables before create_all

DATABASE_URL_ENV = "PCF_DATABASE_URL"
SQLITE_PRAGMAS = {
    "journal_mode": "WAL",
    "busy_timeout": "5000",
    "foreign_keys": "ON",
    "synchronous": "NORMAL",
}

_engines: dict[str, Engine] = {}


def default_sqlite_path() -> Path:
    """``$XDG_DATA_HOME/pcf-review/pcf.db``, or ``~/.local/share/pcf-review/pcf.db``."""
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "pcf-review" / "pcf.db"


def _resolve(url: str | None) -> str:
    return url or os.environ.get(DATABASE_URL_ENV) or f"sqlite:///{default_sqlite_path()}"


def database_url(url: str | None = None) -> str:
    """Where the data lives, safe to show: any password in the URL is masked.

    Args:
        url: an explicit URL; by default ``PCF_DATABASE_URL``, else the user data folder.
    """
    return make_url(_resolve(url)).render_as_string(hide_password=True)


def _set_sqlite_pragmas(dbapi_connection: Any, _connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    for name, value in SQLITE_PRAGMAS.items():
        cursor.execute(f"PRAGMA {name}={value}")
    cursor.close()


def get_engine(url: str | None = None) -> Engine:
    """The engine for ``url``, created once per URL with its tables.

    SQLite connections get WAL, a 5 s busy timeout, foreign keys and ``synchronous=NORMAL``;
    the folder of a SQLite file is created if missing. A plain function, so that Streamlit can
    wrap it in ``st.cache_resource``.

    Args:
        url: a SQLAlchemy URL; by default ``PCF_DATABASE_URL``, else SQLite in the user data
            folder (see :func:`default_sqlite_path`).
    """
    resolved = _resolve(url)
    if resolved in _engines:
        return _engines[resolved]
    parsed = make_url(resolved)
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(resolved)
    if is_sqlite:
        event.listen(engine, "connect", _set_sqlite_pragmas)
    SQLModel.metadata.create_all(engine)
    _engines[resolved] = engine
    return engine


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends and rolls back if it raises.

    Objects stay readable after the block (``expire_on_commit=False``).

    Example:
        >>> with session_scope(get_engine()) as session:  # doctest: +SKIP
        ...     dataset = import_items(items, session=session, name="demo", fmt="jsonl")
    """
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
        session.commit()
