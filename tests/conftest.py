"""Shared fixtures. Every test gets its own database, so no test touches the user's: a SQLite
file, or with ``PCF_TEST_DATABASE_URL`` a database of its own on that PostgreSQL server
(``tests/demo_database.py``). ``engine``/``session`` are that empty database,
``demo_engine``/``db`` a copy of the demo. Tests of SQLite alone are marked ``sqlite_only``.

``PCF_DATABASE_URL`` names the test's database for every test, but the database is made only for
a test that asks for it: through ``isolated_database`` (every database fixture asks for it) or,
where it reaches the database only through ``PCF_DATABASE_URL`` (a ``pcf`` command), by the
``db`` marker. Tests that ask are marked ``db`` here, and the PostgreSQL pass runs ``-m db``. So
that the markers cannot rot, on SQLite a test that made its database without the ``db`` marker
fails. A test on a database of a wider-scoped fixture (``new_database``) is marked by hand too;
the browser tests are not, but for one journey.

One database style: a test reads and writes through ``session`` or ``db`` (helpers take the
session, not an engine) and calls ``.commit()`` where code with sessions of its own (the app, a
command, another process) must see its writes; the engines are for code that takes an engine.
A test about sessions (two at once; a fresh one per Hypothesis example, or to read back what was
committed or what another process wrote meanwhile), or whose database is ready only later (an
upgrade), opens each other session with ``new_session()``. ``session_scope`` is called only
where it is what is tested. Runs built by hand come from ``tests.factories.stored_run``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine
from sqlmodel import Session

from pcf.store import get_engine
from tests.demo_database import (
    MADE,
    SQLITE_NAME,
    copy_demo,
    create_database,
    database_url_in,
    drop_database,
    on_postgres,
)
from tests.factories import make_mixed_runs
from tests.markdown_renderer import StreamlitRenderer, missing
from tests.served_app import in_ci

# No test reaches the Hugging Face hub: `datasets` and `huggingface_hub` read these on import.
os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"

# Shared provider checks live in a helper module; let pytest explain their failed asserts.
pytest.register_assert_rewrite("tests.judge_providers")


SLOW = (
    "tests/e2e/",  # a real Chromium over the whole app
    "tests/test_serving.py",  # the app served by `streamlit run`
    "tests/runs/test_batch_kill.py",  # processes killed in the middle of their work
    "tests/runs/test_live_resume.py",
    "tests/runs/test_run_commands.py",  # `pcf` processes racing for one run
    "tests/store/test_outages.py",  # a PostgreSQL server restarted and stopped under `pcf`
    "tests/labelling/test_queue.py::test_three_annotators_at_once",
    "tests/analysis/test_markdown.py::test_long_lines_render_in_linear_time",  # 1M characters
)
"""The tests marked ``slow`` (by path, so the test files stay as they are): ``pytest -m "not
slow"`` is the quick subset; ``make test`` runs everything."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        where = f"{item.path.relative_to(root).as_posix()}::{item.name}"
        if where.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
    for item in items:
        if "isolated_database" in item.fixturenames:
            item.add_marker(pytest.mark.db)
    if not on_postgres():
        return
    for item in items:
        if marker := item.get_closest_marker("sqlite_only"):
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.skip(reason=f"SQLite only: {reason}"))


@pytest.fixture(autouse=True)
def pcf_database_url(request: pytest.FixtureRequest, tmp_path, monkeypatch) -> Iterator[str]:
    """Point ``PCF_DATABASE_URL`` at the test's own database (a SQLite file in the test's
    folder), made only for a test marked ``db``; on SQLite, fail a test that made it without
    the marker."""
    url = database_url_in(tmp_path)
    monkeypatch.setenv("PCF_DATABASE_URL", url)
    marked = request.node.get_closest_marker("db") is not None
    if marked:
        create_database(url)
    yield url
    if marked:
        drop_database(url)
    elif (
        not on_postgres()
        and request.node.get_closest_marker("sqlite_only") is None
        and url not in MADE  # a browser test's served database, made on purpose
        and (tmp_path / SQLITE_NAME).exists()
    ):
        pytest.fail(
            f"{request.node.nodeid} made its database ({SQLITE_NAME}, through PCF_DATABASE_URL) "
            "without the db marker: mark it @pytest.mark.db, so that the PostgreSQL pass runs it",
            pytrace=False,
        )


@pytest.fixture
def isolated_database(pcf_database_url: str) -> str:
    """The test's own fresh, empty database, where ``PCF_DATABASE_URL`` points: its URL (asking
    for it marks the test ``db``)."""
    return pcf_database_url


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
def new_session(isolated_database: str) -> Callable[[], Session]:
    """Opens another session on the test's database, empty or demo: ``with new_session() as s``
    (objects stay readable after commits; nothing is committed unless the test does)."""
    return lambda: Session(get_engine(isolated_database), expire_on_commit=False)


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


@pytest.fixture
def mixed_runs(isolated_database: str, tmp_path) -> tuple[str, ...]:
    """The runs of :func:`tests.factories.make_mixed_runs`, in the test's own database: several
    candidate counts, executions, items stopped early, failed calls and an APOCJudge run."""
    return make_mixed_runs(tmp_path)


@pytest.fixture(scope="module")
def streamlit() -> Iterator[StreamlitRenderer]:
    """Streamlit's Markdown pipeline in a Node.js process, for the whole module."""
    if (why := missing()) is not None:
        if in_ci():
            pytest.fail(f"{why}; CI is set, so the renderer tests must run", pytrace=False)
        pytest.skip(why)
    renderer = StreamlitRenderer()
    yield renderer
    renderer.close()
