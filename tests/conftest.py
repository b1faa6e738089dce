"""Every test gets its own SQLite file, so no test touches the user's database."""

from __future__ import annotations

import pytest

# Shared provider checks live in a helper module; let pytest explain their failed asserts.
pytest.register_assert_rewrite("tests.judge_providers")


@pytest.fixture(autouse=True)
def isolated_database(tmp_path, monkeypatch):
    """Point ``PCF_DATABASE_URL`` at a fresh SQLite file in the test's folder."""
    url = f"sqlite:///{tmp_path / 'pcf.db'}"
    monkeypatch.setenv("PCF_DATABASE_URL", url)
    return url
