"""Shared fixtures. Every test gets its own SQLite file, so no test touches the user's database:
``engine``/``session`` are that empty database, ``demo_engine``/``db`` a copy of the demo."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlmodel import Session

from pcf.store import get_engine
from tests.demo_database import copy_demo

# Shared provider checks live in a helper module; let pytest explain their failed asserts.
pytest.register_assert_rewrite("tests.judge_providers")


@pytest.fixture(autouse=True)
def isolated_database(tmp_path, monkeypatch) -> str:
    """Point ``PCF_DATABASE_URL`` at a fresh SQLite file in the test's folder."""
    url = f"sqlite:///{tmp_path / 'pcf.db'}"
    monkeypatch.setenv("PCF_DATABASE_URL", url)
    return url


@pytest.fixture
def engine(isolated_database: str) -> Iterator[Engine]:
    """The test's own empty database."""
    engine = get_engine(isolated_database)
    yield engine
    engine.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """A session on the test's empty database (objects stay readable after commits)."""
    with Session(engine, expire_on_commit=False) as s:
        yield s


@pytest.fixture
def demo_engine(isolated_database: str) -> Engine:
    """The test's own copy of the demo database, where ``PCF_DATABASE_URL`` points."""
    copy_demo(isolated_database)
    return get_engine(isolated_database)


@pytest.fixture
def db(demo_engine: Engine) -> Iterator[Session]:
    """A session on the test's demo database, for reading what the code under test wrote."""
    with Session(demo_engine) as s:
        yield s
