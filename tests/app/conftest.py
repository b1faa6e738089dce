"""AppTest fixtures: every test gets its own copy of the demo database, and the app runs as
``streamlit run app.py`` runs it."""

from __future__ import annotations

import pytest
from sqlmodel import Session
from streamlit.testing.v1 import AppTest

from pcf.access import operator
from pcf.runs.manage import judge_run
from pcf.runs.spec import RunSpec
from pcf.weights import PRESETS
from tests.app import local_app


@pytest.fixture
def app(db: Session) -> AppTest:
    """The app after its first run (the Overview page), on this test's demo database, in local
    mode: the local person (an admin) is named.

    AppTest starts every run in Streamlit's legacy ``pages/`` folder mode, so a page picked with
    ``switch_page`` first runs alone; it hands over to app.py (``pages.shared.ensure_app_frame``),
    as on a new server.
    """
    return local_app(db)


@pytest.fixture
def adaptive_run(db: Session) -> str:
    """An adaptive run of the demo (the demo-pcf run's calls, from the cache) that settled its
    winners on the rank-only weights; ask for it before the page, so the sidebar lists it."""
    spec = RunSpec(
        "demo",
        "demo-adaptive",
        k=7,
        executions=3,
        adaptive="confident",
        risk=0.05,
        stop_on=PRESETS["rank-only"],
    )
    judge_run(spec, session=db, actor=operator())
    return spec.run_name
