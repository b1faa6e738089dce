"""The one engine factory, the database location, and the transaction scope."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, event, make_url
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, create_engine

from pcf.store.schema import prepare

DATABASE_URL_ENV = "PCF_DATABASE_URL"
SQLITE_PRAGMAS = {
    "journal_mode": "WAL",
    "busy_timeout": "5000",
    "foreign_keys": "ON",
    "synchronous": "NORMAL",
    "journal_size_limit": str(64 * 1024 * 1024),  # the WAL file shrinks back after a checkpoint
}

WRITE_ATTEMPTS = 50
"""Tries of :func:`write_with_retry`: enough for a few processes saving the same thing at once."""

_engines: dict[str, Engine] = {}
T = TypeVar("T")


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
    """The engine for ``url``, created once per URL, its database ready for this code.

    A new database is created at the newest schema revision; an older SQLite file is upgraded
    after a backup copy; an older PostgreSQL database, or one newer than the code, is refused
    (:func:`pcf.store.schema.prepare`). A plain function, so that Streamlit can wrap it in
    ``st.cache_resource``.

    Args:
        url: a SQLAlchemy URL; by default ``PCF_DATABASE_URL``, else SQLite in the user data
            folder (see :func:`default_sqlite_path`).

    Raises:
        SchemaError: the database cannot be used at its revision; the message says why.
    """
    resolved = _resolve(url)
    if resolved in _engines:
        return _engines[resolved]
    engine = unchecked_engine(resolved)
    try:
        prepare(engine)
    except BaseException:
        engine.dispose()
        raise
    _engines[resolved] = engine
    return engine


def unchecked_engine(url: str | None = None) -> Engine:
    """A new engine for ``url`` whatever its schema revision, for ``pcf db`` to inspect and
    upgrade it; everything else uses :func:`get_engine`.

    SQLite connections get WAL, a 5 s busy timeout, foreign keys and ``synchronous=NORMAL``;
    the folder of a SQLite file is created if missing.
    """
    resolved = _resolve(url)
    parsed = make_url(resolved)
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(resolved)
    if is_sqlite:
        event.listen(engine, "connect", _set_sqlite_pragmas)
    return engine


class LostRaceError(Exception):
    """A write that lost a race with another writer and succeeds when tried again."""


TRANSIENT_SQLSTATES = {"40001", "40P01", "55P03"}
"""PostgreSQL's serialization failure, deadlock and lock-not-available."""
TRANSIENT_SQLITE_WORDS = ("database is locked", "database table is locked", "busy")


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost race (a lock, a serialization failure) worth another try."""
    if isinstance(exc, LostRaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    if getattr(exc.orig, "sqlstate", None) in TRANSIENT_SQLSTATES:
        return True
    return any(word in str(exc.orig).lower() for word in TRANSIENT_SQLITE_WORDS)


def write_with_retry(
    engine: Engine, work: Callable[[Session], T], *, attempts: int = WRITE_ATTEMPTS
) -> T:
    """Run ``work(session)`` in a transaction, again in a new one when it loses a race.

    A lock held too long (SQLite), a serialization failure or deadlock (PostgreSQL) or a
    :class:`LostRaceError` rolls the transaction back and tries again, up to ``attempts``
    times with a short growing pause; any other error, or the last one, is raised.

    Example:
        >>> write_with_retry(engine, lambda s: add_adjudication(7, session=s, annotator="ana",
        ...                  choice="c1"))  # doctest: +SKIP
    """
    attempt = 1
    while True:
        try:
            with session_scope(engine) as session:
                return work(session)
        except Exception as exc:
            if attempt >= attempts or not is_transient(exc):
                raise
        time.sleep(min(0.5, 0.01 * attempt) * (0.5 + random.random()))
        attempt += 1


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
