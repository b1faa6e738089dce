"""Schema versions (the Alembic revisions in ``migrations/versions``) and upgrades that lose
nothing. What :func:`prepare` does with a new, behind or newer database: docs/team.md, "Upgrades
with ``pcf db``"; PostgreSQL behind the code is refused so that a team upgrades on purpose, once.

One process migrates at a time (PostgreSQL's advisory lock, SQLite's ``BEGIN IMMEDIATE``). On
PostgreSQL each revision is a transaction (a failed upgrade stops at the revision before); on
SQLite the whole upgrade is one.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    column,
    create_engine,
    event,
    inspect,
    select,
    table,
    text,
)
from sqlalchemy.exc import OperationalError

from pcf.store.models import SQLModel

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

logger = logging.getLogger(__name__)
SCRIPT_LOCATION = "pcf.store:migrations"
VERSIONS = Path(__file__).parent / "migrations" / "versions"
VERSION_TABLE = "alembic_version"
UNVERSIONED_TABLES = frozenset(
    {
        "dataset",
        "item",
        "candidate",
        "run",
        "call",
        "replaced_call",
        "run_lease",
        "provider_batch",
        "adjudication",
    }
)
"""The tables of the last release without migrations (f9302a1), by which :func:`recognise`
knows an unversioned database."""
ADVISORY_LOCK = 0x70636672657669  # "pcfrevi": the key of PostgreSQL's upgrade lock
SQLITE_UPGRADE_WAIT_S = 600  # how long an upgrade waits for another process's write to end


class SchemaError(Exception):
    """A database this code must not use as it is; the message says what to do."""


@dataclass(frozen=True)
class Revision:
    """One schema revision: its id, the one before it, and what it changes."""

    revision: str
    down_revision: str | None
    title: str


@dataclass(frozen=True)
class UpgradeReport:
    """What :func:`upgrade` did: from which revision to which, and the SQLite backup made."""

    before: str | None
    after: str
    backup: Path | None

    @property
    def changed(self) -> bool:
        """Whether any revision was applied (or an unversioned database stamped)."""
        return self.before != self.after


@functools.cache
def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def _config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


@functools.cache
def revisions() -> tuple[str, ...]:
    """Every revision id, oldest first, from the files' names (read without loading Alembic)."""
    return tuple(sorted(p.name.split("_")[0] for p in VERSIONS.glob("[0-9]*_*.py")))


def head() -> str:
    """The newest revision this code knows."""
    return revisions()[-1]


def history() -> list[Revision]:
    """Every revision, oldest first, with the first line of its description."""
    scripts = reversed(list(_script().walk_revisions()))
    return [
        Revision(s.revision, s.down_revision, (s.doc or "").strip().splitlines()[0])  # type: ignore[arg-type]
        for s in scripts
    ]


def current(connection: Connection) -> str | None:
    """The revision the database is stamped with, or None when it has no version table."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    return connection.execute(
        select(column("version_num")).select_from(table(VERSION_TABLE))
    ).scalar()


def recognise(connection: Connection) -> str | None:
    """The revision an unversioned database's tables match, None when it has none of them:
    its run totals are 64-bit from 0002 on, it has the adjudication chain index from 0003 on
    (an index without 64-bit totals is at 0001, and 0003 keeps it).

    Raises:
        SchemaError: some of those tables exist but not all.
    """
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    if not tables & UNVERSIONED_TABLES:
        return None
    if missing := sorted(UNVERSIONED_TABLES - tables):
        raise SchemaError(
            f"the database has some of this tool's tables but not {', '.join(missing)}: it "
            "was not made by pcf-review (or by a release older than migrations can upgrade)"
        )
    totals = {c["name"]: c["type"] for c in inspector.get_columns("run")}
    if not isinstance(totals["input_tokens"], BigInteger):
        return "0001"
    return "0003" if "ux_adjudication_chain" in index_names(connection, "adjudication") else "0002"


def index_names(connection: Connection, table: str) -> set[str]:
    """The names of ``table``'s indexes, expression indexes included (which SQLAlchemy's SQLite
    inspector leaves out)."""
    if connection.dialect.name != "sqlite":
        indexes = inspect(connection).get_indexes(table)
        return {index["name"] for index in indexes if index["name"] is not None}
    listed = connection.execute(
        text("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :table"),
        {"table": table},
    )
    return set(listed.scalars())


def state(connection: Connection) -> tuple[str | None, str | None]:
    """``(stamped, recognised)``: the stamped revision, else the one its tables match."""
    stamped = current(connection)
    return stamped, stamped if stamped is not None else recognise(connection)


def prepare(engine: Engine) -> None:
    """Make ``engine``'s database ready for this code, or refuse it (see the module doc).

    Raises:
        SchemaError: PostgreSQL behind the code, a database newer than it, or unknown tables.
    """
    with engine.connect() as connection:
        stamped, recognised = state(connection)
    if stamped == head():
        return
    if stamped is not None and stamped not in revisions():
        raise _too_new(engine, stamped)
    if recognised is not None and engine.dialect.name != "sqlite":
        raise SchemaError(
            f"the database {engine.url.render_as_string(hide_password=True)} is at schema "
            f"revision {recognised} and this code needs {head()}: run `pcf db upgrade` "
            "(back the database up first; see docs/team.md, Upgrades)"
        )
    report = upgrade(engine)
    if report.backup is not None:
        logger.warning(
            "upgraded the database %s from schema revision %s to %s; the copy from before is %s",
            engine.url.database,
            report.before or "unversioned",
            report.after,
            report.backup,
        )


def _too_new(engine: Engine, revision: str) -> SchemaError:
    return SchemaError(
        f"the database {engine.url.render_as_string(hide_password=True)} is at schema "
        f"revision {revision}, newer than this code knows (head {head()}): upgrade "
        "pcf-review; nothing was written"
    )


def upgrade(engine: Engine, *, to: str = "head") -> UpgradeReport:
    """Bring the database to revision ``to`` under the upgrade lock (a new one is created, an
    unversioned one stamped first). A SQLite file that changes is copied beside itself first
    and compacted after. A database at ``to`` is left as it is.

    Raises:
        SchemaError: a database newer than the code, unknown tables, or ``to`` not a revision
            of this code or behind the database.
    """
    target = head() if to == "head" else to
    if target not in revisions():
        raise SchemaError(f"no schema revision {to!r}; `pcf db history` lists them")
    with _locked(engine) as connection:
        stamped, recognised = state(connection)
        if stamped is not None and stamped not in revisions():
            raise _too_new(engine, stamped)
        if recognised is not None and revisions().index(recognised) > revisions().index(target):
            raise SchemaError(
                f"the database is at revision {recognised}, after {target}: downgrades are "
                "not offered; restore a backup instead"
            )
        if recognised == target and stamped == target:
            return UpgradeReport(stamped, target, None)
        copy = _backup(engine, stamped) if recognised is not None else None
        from alembic import command
        from alembic.runtime.migration import MigrationContext

        def create_at_head() -> None:  # a new database: the head's tables from the models
            SQLModel.metadata.create_all(connection)
            MigrationContext.configure(connection).stamp(_script(), target)

        if recognised is None and target == head():
            _commit_step(connection, create_at_head)
        else:
            if recognised is not None and stamped is None:
                _commit_step(connection, lambda: command.stamp(_config(connection), recognised))
            _commit_step(connection, lambda: command.upgrade(_config(connection), target))
    if copy is not None:
        _compact(engine)
    return UpgradeReport(stamped, target, copy)


def _compact(engine: Engine) -> None:
    """``VACUUM`` and checkpoint a SQLite file (a revision that rewrites a table leaves it as
    large as both copies); while another process reads it, it stays uncompacted."""
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("VACUUM")
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    except OperationalError as exc:
        logger.warning(
            "the upgraded database %s was not compacted (%s): run `sqlite3 %s VACUUM` later",
            engine.url.database,
            exc.orig,
            engine.url.database,
        )


def _commit_step(connection: Connection, work: Callable[[], None]) -> None:
    """Run ``work()`` in transactions of its own on PostgreSQL (so that Alembic opens one per
    revision); on SQLite inside the one upgrade transaction."""
    postgres = connection.dialect.name != "sqlite"
    if postgres and connection.in_transaction():
        connection.commit()
    work()
    if postgres and connection.in_transaction():
        connection.commit()


def _backup(engine: Engine, revision: str | None) -> Path | None:
    """Copy a SQLite file beside itself before it changes (consistent, WAL included), named by
    revision and time: ``pcf.db`` at 0001 -> ``pcf.db.backup-0001-20261203T141500Z``."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(f"{database}.backup-{revision or 'unversioned'}-{stamp}")
    with closing(sqlite3.connect(database)) as source, closing(sqlite3.connect(path)) as copy:
        source.backup(copy)
    return path


@contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A connection that alone may migrate: PostgreSQL's advisory lock, SQLite's write lock."""
    if engine.dialect.name == "sqlite":
        with _sqlite_writer(engine) as connection:
            yield connection
        return
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_LOCK})
        connection.commit()
        try:
            yield connection
        finally:
            if connection.in_transaction():
                connection.rollback()
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK})
            connection.commit()


@contextmanager
def _sqlite_writer(engine: Engine) -> Iterator[Connection]:
    """One transaction holding SQLite's write lock from its first statement, DDL included
    (Python's sqlite3 would open none for DDL). Foreign keys are off while tables are rebuilt,
    as SQLite documents, and checked before the commit.
    """
    if engine.url.database in (None, "", ":memory:"):
        with engine.connect() as connection, connection.begin():
            yield connection
        return
    migrator = create_engine(engine.url, connect_args={"timeout": SQLITE_UPGRADE_WAIT_S})

    @event.listens_for(migrator, "connect")
    def _connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA foreign_keys=OFF")
        dbapi_connection.execute("PRAGMA journal_mode=WAL")

    @event.listens_for(migrator, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        with migrator.connect() as connection, connection.begin():
            yield connection
            if broken := connection.exec_driver_sql("PRAGMA foreign_key_check").all():
                raise SchemaError(f"the upgrade would break foreign keys: {broken[:5]}")
    finally:
        migrator.dispose()
