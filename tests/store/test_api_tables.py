"""The revision that adds the HTTP API's tables (tokens, submitted runs, posted labels) on a
database of the revision before, and back. The two constants name the revisions, so that a
renumbering at merge changes them alone."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pcf.cli import app
from pcf.store import list_tokens, save_member
from tests.store.test_schema import downgrade, kept, rows, upgraded_from

API_TABLES = "0015"
BEFORE = "0014"
pytestmark = pytest.mark.db


def test_the_api_tables_revision_keeps_every_row_and_holds_tokens(
    isolated_database, new_session, tmp_path
):
    """A database at the revision before keeps every row and takes tokens (`pcf tokens
    create`); the downgrade drops the API's tables and keeps the rest."""
    before = upgraded_from(isolated_database, BEFORE, tmp_path / "source")
    with new_session() as session:
        save_member("ci@example.com", "admin", session=session, added_by="test")
        session.commit()
    made = CliRunner().invoke(app, ["tokens", "create", "ci@example.com", "--scope", "read"])
    assert made.exit_code == 0, made.output
    with new_session() as session:
        assert [t.email for t in list_tokens(session=session)] == ["ci@example.com"]
    downgrade(isolated_database, BEFORE)
    after = rows(isolated_database)
    assert not {"api_token", "api_run", "api_label"} & set(after)
    added = {"member": after["member"][:-1], "audit_event": after["audit_event"][:-1]}
    assert kept(before, after | added)
    assert API_TABLES != BEFORE
