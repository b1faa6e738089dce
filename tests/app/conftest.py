"""AppTest fixtures: every test gets its own copy of the demo database, and the app runs as
``streamlit run app.py`` runs it."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from sqlalchemy import Engine
from streamlit.runtime.scriptrunner import script_runner
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[2] / "app.py"


def _run_main_script(main_script_path: str) -> None:
    runpy.run_path(main_script_path, run_name="__main__")


@pytest.fixture
def app(demo_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The app after its first run (the Overview page), on this test's demo database.

    AppTest resets Streamlit's "pages folder" flag before every run, so an app that has a
    ``pages/`` folder runs a page picked with ``switch_page`` without its main script (no
    ``st.navigation``, no shared sidebar). ``streamlit run`` runs the main script on every
    rerun once it has called ``st.navigation``; the patch makes AppTest do the same.
    """
    monkeypatch.setattr(script_runner, "_mpa_v1", _run_main_script)
    return AppTest.from_file(str(APP), default_timeout=30).run()
