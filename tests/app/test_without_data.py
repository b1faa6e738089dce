"""Every page on a database without data, or with a dataset but no run: a hint, no exception;
a database of the release before migrations: upgraded (SQLite) or refused in one line."""

from __future__ import annotations

import pytest
from sqlmodel import Session
from streamlit.testing.v1 import AppTest

from pcf.store import import_items
from tests.app import APP, local_app
from tests.demo_database import on_postgres
from tests.factories import make_item
from tests.store.legacy import restore

PAGES = ["overview", "review", "adjudicate", "compare", "runs", "weights", "report"]
NEEDS_A_RUN = {"review", "compare", "weights"}


def open_page(session: Session, page: str) -> AppTest:
    app = local_app(session)
    app.switch_page(f"pages/{page}.py").run()
    assert not app.exception, app.exception
    return app


@pytest.mark.parametrize("page", PAGES)
def test_an_empty_database_says_how_to_add_a_dataset(session: Session, page: str) -> None:
    app = open_page(session, page)
    infos = [info.value for info in app.info]
    assert any("no dataset yet: run `pcf demo` or `pcf import`" in text for text in infos), infos
    assert [link.proto.page for link in app.get("page_link")] == ["imports"]  # an admin's


@pytest.mark.parametrize("page", sorted(NEEDS_A_RUN))
def test_a_dataset_without_runs_says_how_to_start_one(session: Session, page: str) -> None:
    import_items([make_item("q1")], session=session, name="fresh", fmt="jsonl")
    session.commit()
    infos = [info.value for info in open_page(session, page).info]
    assert any("no run yet: start one on the Runs page" in text for text in infos), infos


@pytest.mark.skipif(not on_postgres(), reason="a PostgreSQL database is upgraded on purpose")
def test_an_out_of_date_postgres_database_is_refused_with_one_line(isolated_database) -> None:
    restore(isolated_database)
    app = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not app.exception, app.exception
    (error,) = [e.value for e in app.error]
    assert "run `pcf db upgrade`" in error
    assert "\n" not in error


@pytest.mark.sqlite_only(reason="an old SQLite file is upgraded at start")
def test_an_old_sqlite_file_opens_upgraded(isolated_database, new_session) -> None:
    restore(isolated_database)
    app = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not app.exception, app.exception
    assert not app.error
    with new_session() as session:  # the database is ready only now
        app = local_app(session)
    assert "demo-pcf" in app.sidebar.selectbox(key="run").options
