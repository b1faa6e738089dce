"""The demo database for tests: built once per test process, copied into each test's SQLite."""

from __future__ import annotations

import atexit
import functools
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

from sqlalchemy import make_url

from pcf.runs.study import build_demo
from pcf.store import get_engine, session_scope


@functools.cache
def _template() -> Path:
    """A SQLite file holding the demo dataset and its three simulated runs."""
    folder = tempfile.TemporaryDirectory(prefix="pcf-demo-")
    atexit.register(folder.cleanup)
    path = Path(folder.name) / "demo.db"
    engine = get_engine(f"sqlite:///{path}")
    with session_scope(engine) as session:
        build_demo(session)
    engine.dispose()
    return path


def copy_demo(url: str) -> None:
    """Fill the (empty) SQLite database at ``url`` with a copy of the demo database."""
    with (
        closing(sqlite3.connect(_template())) as source,
        closing(sqlite3.connect(make_url(url).database)) as target,
    ):
        source.backup(target)
