"""AppTest fixtures: every test gets its own copy of the demo database, and the app runs as
``streamlit run app.py`` runs it."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from streamlit.testing.v1 import AppTest

from tests.app import local_app


@pytest.fixture
def app(demo_engine: Engine) -> AppTest:
    """The app after its first run (the Overview page), on this test's demo database, in local
    mode: the local person (an admin) is named.

    AppTest starts every run in Streamlit's legacy ``pages/`` folder mode, so a page picked with
    ``switch_page`` first runs alone; it hands over to app.py (``pages.shared.ensure_app_frame``),
    as on a new server.
    """
    return local_app(demo_engine)
