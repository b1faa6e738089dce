"""The one engine factory, the database location, the transaction scope, and the retries of
a write that lost a race or its connection. A PostgreSQL server that goes away is waited for
here and nowhere else: pooled connections are pinged, a new connection is tried again for up to
``PCF_DATABASE_WAIT_S`` seconds, and a transaction cut by a lost connection is run again
(:func:`commit_retrying`).
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, event, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
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

WRITE_ATTEMPTS = 50  # enough for a few processes saving the same thing at once
DATABASE_WAIT_ENV = "PCF_DATABASE_WAIT_S"
DATABASE_WAIT_S = 30.0
LOST_CONNECTION_ATTEMPTS = 3  # each new connection waits for the server
UNREACHABLE_SQLSTATES = ("08", "57P01", "57P02", "57P03")
"""PostgreSQL's connection exceptions (by prefix) and a server shutting down or starting up."""
UNREACHABLE_WORDS = (
    "connection refused",
    "the database system is",  # starting up, shutting down, in recovery mode
    "server closed the connection",
    "terminating connection",
    "connection reset",
    "could not receive data",
    "could not send data",
    "no such file or directory",  # the server's Unix socket, gone while it restarts
    "timeout expired",
)
"""Words of a driver's error saying the server cannot be reached (such errors have no SQLSTATE)."""

logger = logging.getLogger(__name__)
_engines: dict[str, Engine] = {}
T = TypeVar("T")


def _resolve(url: str | None) -> str:
    """``url``, else ``PCF_DATABASE_URL``, else ``$XDG_DATA_HOME/pcf-review/pcf.db`` (by default
    in ``~/.local/share``)."""
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return url or os.environ.get(DATABASE_URL_ENV) or f"sqlite:///{data_home / 'pcf-review/pcf.db'}"


def database_url(url: str | None = None) -> str:
    """Where the data lives (as :func:`_resolve` finds it), any password masked."""
    return make_url(_resolve(url)).render_as_string(hide_password=True)


def _set_sqlite_pragmas(dbapi_connection: Any, _connection_record: Any) -> None:
    for name, value in SQLITE_PRAGMAS.items():
        dbapi_connection.execute(f"PRAGMA {name}={value}")


def get_engine(url: str | None = None) -> Engine:
    """The engine for ``url`` (as :func:`database_url`), created once per URL, its database
    made ready for this code (:func:`pcf.store.schema.prepare`).

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


@atexit.register
def _close_engines() -> None:
    """Close the engines' pooled connections as the process ends: SQLite then checkpoints a
    file's write-ahead log into it and removes the log (when no other process has it open), so
    a command leaves the file alone, as large as what it holds, instead of up to
    ``journal_size_limit`` bytes of log beside it."""
    for engine in _engines.values():
        engine.dispose()


def unchecked_engine(url: str | None = None) -> Engine:
    """A new engine for ``url`` whatever its schema revision, for ``pcf db``; everything else
    uses :func:`get_engine`. A SQLite file's folder is created if missing."""
    resolved = _resolve(url)
    parsed = make_url(resolved)
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    if is_sqlite:
        engine = create_engine(resolved)
        event.listen(engine, "connect", _set_sqlite_pragmas)
    else:
        engine = create_engine(resolved, pool_pre_ping=True)
        event.listen(engine, "do_connect", _PatientConnect(database_url(resolved)))
    return engine


def database_wait_s() -> float:
    """How long a server that cannot be reached is waited for: ``PCF_DATABASE_WAIT_S``.

    Raises:
        ValueError: the variable is not a number of seconds.
    """
    value = os.environ.get(DATABASE_WAIT_ENV, "").strip()
    try:
        wait = float(value) if value else DATABASE_WAIT_S
    except ValueError:
        wait = -1.0
    if not wait >= 0:
        raise ValueError(f"{DATABASE_WAIT_ENV} must be a number of seconds (>= 0), not {value!r}")
    return wait


def _unreachable(error: BaseException) -> bool:
    """Whether a driver's error says the server is gone or cannot be reached now."""
    if isinstance(error, sqlite3.Error):
        return False
    if str(getattr(error, "sqlstate", None) or "").startswith(UNREACHABLE_SQLSTATES):
        return True
    return any(word in str(error).lower() for word in UNREACHABLE_WORDS)


def is_disconnect(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost or refused connection to a database server."""
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or (exc.orig is not None and _unreachable(exc.orig))
    return False


class _PatientConnect:
    """The ``do_connect`` hook of a server's engine: a refused connection is tried again with
    backoff for up to :func:`database_wait_s`; after a wait ran out, the next ones fail at
    once (a command ends after one wait) until one succeeds."""

    def __init__(self, shown_url: str) -> None:
        self.shown_url, self.gave_up = shown_url, False

    def __call__(self, dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        deadline, pause = None, 0.05
        while True:
            try:
                connection = dialect.connect(*cargs, **cparams)
            except dialect.loaded_dbapi.Error as exc:
                if self.gave_up or not _unreachable(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + database_wait_s()
                    logger.warning(
                        "cannot reach the database %s (%s); trying again for up to %g s",
                        self.shown_url,
                        short_reason(exc),
                        deadline - now,
                    )
                if now >= deadline:
                    self.gave_up = True
                    raise
                time.sleep(min(pause, deadline - now))
                pause = min(2 * pause, 2.0)
            else:
                self.gave_up = False
                return connection


def short_reason(error: BaseException) -> str:
    """The last clause of an error's first line, e.g. ``Connection refused``."""
    lines = str(error).strip().splitlines()
    return lines[0].rsplit(": ", 1)[-1].strip() if lines else type(error).__name__


class LostRaceError(Exception):
    """A write that lost a race with another writer and succeeds when tried again."""


TRANSIENT_SQLSTATES = {"40001", "40P01", "55P03"}  # serialization failure, deadlock, lock
TRANSIENT_SQLITE_WORDS = ("database is locked", "database table is locked", "busy")


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost race (a lock, a serialization failure) worth another try."""
    if not isinstance(exc, OperationalError):
        return isinstance(exc, LostRaceError)
    if getattr(exc.orig, "sqlstate", None) in TRANSIENT_SQLSTATES:
        return True
    return any(word in str(exc.orig).lower() for word in TRANSIENT_SQLITE_WORDS)


def commit_retrying(session: Session, work: Callable[[], T]) -> T:
    """Run ``work()`` in ``session``'s transaction and commit it; one cut by a lost connection
    is run again, up to :data:`LOST_CONNECTION_ATTEMPTS` times. Any error is raised after a
    rollback. ``work`` must be safe to run again after a rollback.
    """
    attempt = 1
    while True:
        try:
            result = work()
            session.commit()
            return result
        except Exception as exc:
            session.rollback()
            if attempt >= LOST_CONNECTION_ATTEMPTS or not is_disconnect(exc):
                raise
        attempt += 1


def write_with_retry(engine: Engine, work: Callable[[Session], T]) -> T:
    """Run ``work(session)`` in a transaction, again in a new one (up to
    :data:`WRITE_ATTEMPTS` times, after a short growing pause) when it loses a race
    (:func:`is_transient`) or its connection (:func:`commit_retrying`)."""
    attempt = 1
    while True:
        try:
            with Session(engine, expire_on_commit=False) as session:
                return commit_retrying(session, lambda: work(session))
        except Exception as exc:
            if attempt >= WRITE_ATTEMPTS or not is_transient(exc):
                raise
        time.sleep(min(0.5, 0.01 * attempt) * (0.5 + random.random()))
        attempt += 1


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends, rolls back if it raises (objects stay read)."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
        session.commit()
