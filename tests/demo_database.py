"""Test databases: a fresh empty one per test, and the demo database built once per process.

By default every database is a SQLite file in a temporary folder. With ``PCF_TEST_DATABASE_URL``
set to a PostgreSQL server (``postgresql+psycopg://user@host:port/postgres``; ``.ci/with-postgres``
starts a throwaway one), every database is a database of its own on that server: the demo is built
once per process into a template database and each copy is a ``CREATE DATABASE ... TEMPLATE``.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

from sqlalchemy import URL, Engine, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from pcf.access import operator
from pcf.runs.study import build_demo
from pcf.store import get_engine, session_scope
from tests.factories import pcf_process

TEST_DATABASE_URL_ENV = "PCF_TEST_DATABASE_URL"
SQLITE_NAME = "pcf.db"
MADE: set[str] = set()
"""The URLs :func:`new_database` made: databases made on purpose, not by the code a test runs."""
_numbers = itertools.count()


def postgres_server() -> URL | None:
    """The PostgreSQL server the tests run on (``PCF_TEST_DATABASE_URL``), or None for SQLite."""
    url = os.environ.get(TEST_DATABASE_URL_ENV)
    return make_url(url) if url else None


def on_postgres() -> bool:
    """Whether this test process runs its databases on PostgreSQL."""
    return postgres_server() is not None


@functools.cache
def _admin() -> Engine:
    """An autocommit engine on the server's maintenance database, for CREATE/DROP DATABASE."""
    return create_engine(postgres_server(), isolation_level="AUTOCOMMIT", poolclass=NullPool)


def _create(name: str, template: str = "template0") -> str:
    with _admin().connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    return _url(name)


def _url(name: str) -> str:
    return postgres_server().set(database=name).render_as_string(hide_password=False)


def database_url_in(folder: Path) -> str:
    """The URL of a database not made yet: a SQLite file in ``folder`` (which the first
    connection makes), or a new name on the server (see :func:`create_database`)."""
    if not on_postgres():
        return f"sqlite:///{folder / SQLITE_NAME}"
    return _url(f"pcf_test_{os.getpid()}_{next(_numbers)}")


def create_database(url: str) -> None:
    """Make the empty database at ``url`` (from :func:`database_url_in`) on the server; a SQLite
    file is made by its first connection."""
    if on_postgres():
        _create(make_url(url).database)


def new_database(folder: Path) -> str:
    """The URL of a new, empty database: a SQLite file in ``folder``, or one on the server."""
    url = database_url_in(folder)
    create_database(url)
    MADE.add(url)
    return url


def drop_database(url: str) -> None:
    """Remove a database made by :func:`new_database` (a SQLite file goes with its folder)."""
    if on_postgres():
        name = make_url(url).database
        with _admin().connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _build_demo(url: str) -> None:
    engine = get_engine(url)
    with session_scope(engine) as session:
        build_demo(session=session, actor=operator())
    engine.dispose()


@functools.cache
def _template(command: bool = False) -> str:
    """The URL of a database holding the demo dataset and its three simulated runs, built in
    this process, or with ``command`` by ``pcf demo`` in a child process: as the browser tests'
    servers find it (what the pages read stored too), and without an event loop of this process
    (Playwright's sync API holds one)."""
    if on_postgres():
        url = _create(f"pcf_demo_{os.getpid()}_{int(command)}")
        atexit.register(drop_database, url)
    else:
        folder = tempfile.TemporaryDirectory(prefix="pcf-demo-")
        atexit.register(folder.cleanup)
        url = f"sqlite:///{Path(folder.name) / 'demo.db'}"
    if command:
        root = Path(__file__).resolve().parents[1]
        built = pcf_process("demo", env={"PCF_DATABASE_URL": url}, cwd=root)
        if built.returncode:
            raise RuntimeError(f"pcf demo failed with {built.returncode}:\n{built.stderr}")
    else:
        _build_demo(url)
    return url


def copy_demo(url: str, *, command: bool = False) -> None:
    """Replace the empty database at ``url`` (from :func:`new_database`) by a demo copy (with
    ``command``, of the one ``pcf demo`` built: :func:`_template`)."""
    template = _template(command)
    if on_postgres():
        drop_database(url)
        _create(make_url(url).database, template=make_url(template).database)
        return
    with (
        closing(sqlite3.connect(make_url(template).database)) as source,
        closing(sqlite3.connect(make_url(url).database)) as target,
    ):
        source.backup(target)
