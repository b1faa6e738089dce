"""The engine factory: SQLite settings, the database URL and its default (pcf/store/engine.py)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from pcf.store import (
    DATABASE_URL_ENV,
    database_url,
    get_engine,
    insert_calls,
)
from tests.factories import call_row

DEMO_ITEMS = Path(__file__).resolve().parents[2] / "data" / "demo" / "items.jsonl"


@pytest.mark.sqlite_only("the pragmas are SQLite's")
def test_sqlite_pragmas_are_set_on_every_connection(engine: Engine) -> None:
    names = ("journal_mode", "busy_timeout", "foreign_keys", "synchronous", "journal_size_limit")
    with engine.connect() as first, engine.connect() as second:
        for connection in (first, second):
            pragmas = {name: connection.execute(text(f"PRAGMA {name}")).scalar() for name in names}
            assert pragmas == {
                "journal_mode": "wal",
                "busy_timeout": 5000,
                "foreign_keys": 1,
                "synchronous": 1,  # NORMAL
                "journal_size_limit": 64 * 1024 * 1024,
            }


def test_foreign_keys_are_enforced(session: Session) -> None:
    with pytest.raises(IntegrityError):
        insert_calls([call_row(run_id=99, item_db_id=99, call_index=0)], session=session)


def test_database_url_env_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path}/from-env.db"
    monkeypatch.setenv(DATABASE_URL_ENV, url)
    engine = get_engine()
    assert str(engine.url) == url
    assert database_url() == url
    assert (tmp_path / "from-env.db").is_file()
    engine.dispose()


def test_default_database_lives_in_the_user_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    engine = get_engine()
    assert database_url() == f"sqlite:///{tmp_path}/data/pcf-review/pcf.db"
    assert (tmp_path / "data" / "pcf-review" / "pcf.db").is_file()
    assert get_engine() is engine
    engine.dispose()


def test_database_url_masks_the_password() -> None:
    shown = database_url("postgresql://reviewer:s3cret@db.example.org/pcf")
    assert "s3cret" not in shown
    assert shown == "postgresql://reviewer:***@db.example.org/pcf"


@pytest.mark.sqlite_only("the write-ahead log is SQLite's")
def test_a_command_leaves_its_database_file_without_a_write_ahead_log(tmp_path: Path) -> None:
    """``pcf import`` and ``pcf judge``, each its own process, leave the file alone: its log
    checkpointed into it and removed as the process ends (it would stay behind, up to
    ``journal_size_limit`` bytes, and count in the database's size)."""
    database = tmp_path / "pcf.db"
    env = {**os.environ, DATABASE_URL_ENV: f"sqlite:///{database}"}
    for args in (
        ("import", "jsonl", str(DEMO_ITEMS), "--name", "demo"),
        ("judge", "demo", "--protocol", "direct", "--limit", "5"),
    ):
        subprocess.run([sys.executable, "-m", "pcf", *args], env=env, check=True, timeout=300)
        assert not database.with_name("pcf.db-wal").exists()
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM call").fetchone() == (5,)
