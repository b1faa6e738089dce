"""The revision that adds the webhooks' tables (subscriptions, deliveries, attempts) on a
database of the revision before, and back. The two constants name the revisions, so that a
renumbering at merge changes them alone."""

from __future__ import annotations

import pytest
from sqlmodel import select

from pcf.access import operator
from pcf.connectors.webhook_sender import create_webhook
from pcf.store import WebhookDelivery, get_engine, queue_event, session_scope
from tests.store.test_schema import downgrade, kept, rows, upgraded_from

WEBHOOK_TABLES = "0016"
BEFORE = "0015"
pytestmark = pytest.mark.db


def test_the_webhook_tables_revision_keeps_every_row_and_holds_an_outbox(
    isolated_database, tmp_path, monkeypatch
):
    """A database at the revision before keeps every row and takes a webhook whose event is
    queued; the downgrade drops the webhooks' tables and keeps the rest."""
    before = upgraded_from(isolated_database, BEFORE, tmp_path / "source")
    monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "hooks.example.org")
    with session_scope(get_engine(isolated_database)) as session:
        create_webhook(
            "https://hooks.example.org/pcf", ["run.failed"], session=session, actor=operator()
        )
        assert queue_event("run.failed", {"run": "r"}, session=session) == 1
    with session_scope(get_engine(isolated_database)) as session:
        (delivery,) = session.exec(select(WebhookDelivery)).all()
    assert (delivery.state, delivery.payload["data"]) == ("pending", {"run": "r"})
    get_engine(isolated_database).dispose()
    downgrade(isolated_database, BEFORE)
    after = rows(isolated_database)
    assert not {"webhook", "webhook_delivery", "webhook_attempt"} & set(after)
    added = {"audit_event": after["audit_event"][:-1]}
    assert kept(before, after | added)
    assert WEBHOOK_TABLES != BEFORE
