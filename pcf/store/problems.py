"""A database that cannot be used (a full disk, a read-only file, a file that vanished, a
server that cannot be reached) told in one line that says what happened and what to do.

SQLite in WAL mode goes on writing into a file moved or deleted while a connection is open,
and what it writes is lost, so every commit on a SQLite file first checks that the file at its
path is still the one the connection opened (a listener on every engine).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, event, make_url
from sqlalchemy.exc import DBAPIError

from pcf.store.engine import DATABASE_WAIT_ENV, database_wait_s, is_disconnect, short_reason

FILE_INFO = "pcf_database_file"  # the connection record's info: the file's path, device, inode
RESUMES = "try again: a run resumes where it stopped"


class DatabaseMovedError(RuntimeError):
    """The SQLite file a connection writes to is no longer at its path (moved or deleted)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"the database file {path} was moved or deleted while in use")
        self.path = path


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


@event.listens_for(Engine, "connect")
def _remember_file(dbapi_connection: Any, connection_record: Any) -> None:
    """Note which file a new SQLite connection opened (none for memory or temporary ones)."""
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    for _, name, path in dbapi_connection.execute("PRAGMA database_list").fetchall():
        if name == "main" and path:
            connection_record.info[FILE_INFO] = (path, _file_identity(path))


@event.listens_for(Engine, "commit")
def _check_file(connection: Connection) -> None:
    """Refuse to commit into a SQLite file no longer at its path (:class:`DatabaseMovedError`)."""
    noted = connection.connection.info.get(FILE_INFO)
    if noted is not None and _file_identity(noted[0]) != noted[1]:
        raise DatabaseMovedError(noted[0])


def storage_problem(exc: BaseException, url: str) -> str | None:
    """One line on why the database at ``url`` cannot be used after ``exc``, and what to do
    (never showing a password); None when ``exc`` is not such a problem."""
    if isinstance(exc, DatabaseMovedError):
        return MOVED.format(path=Path(exc.path), resumes=RESUMES)
    if is_disconnect(exc):
        return _unreachable(url, exc)
    orig = exc.orig if isinstance(exc, DBAPIError) else None
    if not isinstance(orig, sqlite3.Error):
        return None
    path = Path(make_url(url).database or "")
    for prefix, explain in SQLITE_PROBLEMS:
        if orig.sqlite_errorname.startswith(prefix):
            why = _why_not_open(path) if prefix == "SQLITE_CANTOPEN" else ""
            return explain.format(path=path, why=why, resumes=RESUMES)
    return None


def _unreachable(url: str, exc: BaseException) -> str:
    shown = make_url(url).render_as_string(hide_password=True)
    reason = short_reason(exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc)
    return (
        f"the database {shown} cannot be reached ({reason}), not even after waiting "
        f"{database_wait_s():g} s for it; what was stored is kept, a change under way was not. "
        f"Check that the server is up and reachable (or wait longer: {DATABASE_WAIT_ENV}), "
        f"then {RESUMES}"
    )


def _why_not_open(path: Path) -> str:
    if not path.parent.is_dir():
        return f"its folder {path.parent} does not exist"
    if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
        return "it is on a read-only file system"
    return "it or its folder cannot be read or written (permissions, an immutable attribute)"


MOVED = (
    "the database file {path} was moved or deleted while in use, so nothing more was written "
    "to it. Put it back (or point PCF_DATABASE_URL at where it is now), then {resumes}"
)
SQLITE_PROBLEMS = (
    (
        "SQLITE_FULL",
        "the disk that holds the database {path} is full; nothing stored was lost. Free some "
        "space, then {resumes}",
    ),
    ("SQLITE_READONLY_DBMOVED", MOVED),  # SQLite's own check, without WAL
    (
        "SQLITE_READONLY",
        "the database {path} is read-only (its file or its file system cannot be written), so "
        "nothing was written. Make it writable, or point PCF_DATABASE_URL at a writable copy, "
        "and try again",
    ),
    (
        "SQLITE_CANTOPEN",
        "cannot open the database file {path}: {why}. Once it can be opened, {resumes}",
    ),
    (
        "SQLITE_IOERR",
        "the disk that holds the database {path} failed to read or write it (disk I/O error), "
        "so the last change was not stored. Check the disk and the file, then {resumes}",
    ),
)
"""SQLite's error names (by prefix, first match) and the line that explains each."""
