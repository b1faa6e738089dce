"""Webhooks (pcf/connectors/webhook_sender.py): each event, queued by the real functions that make
the change (CLI runs against the wire server, a background run, a label, a resolution), reaches
a real loopback receiver signed per Standard Webhooks; a receiver that is down gets every retry
of the schedule and a logged failure, and a redelivery; nothing goes to a host the operator did
not name, and no redirect is followed."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from sqlmodel import select
from standardwebhooks import Webhook as Verifier
from typer.testing import CliRunner

from pcf.access import operator
from pcf.cli import app
from pcf.connectors.webhook_sender import (
    EVENTS,
    WebhookURLError,
    create_webhook,
    deliver_due,
    deliveries,
    redeliver_delivery,
)
from pcf.labelling.labels import save_label
from pcf.labelling.resolutions import resolve
from pcf.runs.background import cancel_run, start_run
from pcf.runs.spec import RunSpec
from pcf.store import (
    DELIVERY_CLAIM_S,
    WebhookAttempt,
    WebhookDelivery,
    claim_due_deliveries,
    get_dataset,
    item_db_ids,
    queue_event,
    session_scope,
    utc_now,
)
from tests.judge_providers import OPENAI, use_environment
from tests.runs.processes import import_dataset
from tests.runs.test_background import wait_until_done
from tests.runs.test_batch import answer as batch_answer
from tests.webhook_receiver import Receiver
from tests.wire_server import WireServer

pytestmark = pytest.mark.db


def subscribe(engine, url: str, events=EVENTS):
    with session_scope(engine) as session:
        return create_webhook(url, list(events), session=session, actor=operator())


def deliver_all(engine, schedule=(0, 0, 0)) -> int:
    """Attempts made until nothing is due (a zero schedule makes each retry due at once)."""
    made = 0
    while sent := deliver_due(engine, schedule=schedule):
        made += sent
    return made


def test_each_event_comes_from_the_function_that_makes_the_change_signed(
    demo_engine, tmp_path, monkeypatch
):
    monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "127.0.0.1")
    use_environment(monkeypatch, OPENAI)
    prices = tmp_path / "prices.json"
    price = [0.15, 0.60]
    prices.write_text(json.dumps({"gpt-test": price, "gpt-capped": price}), encoding="utf-8")
    monkeypatch.setenv("PCF_PRICES", str(prices))
    with Receiver() as receiver:
        hook = subscribe(demo_engine, receiver.url)
        # run.finished, run.failed: background runs (the pages' and the API's way)
        start_run(
            demo_engine, RunSpec("demo", "fine", model="sim-a", k=1, limit=2), actor=operator()
        )
        assert wait_until_done(demo_engine, "fine").status == "finished"
        start_run(demo_engine, RunSpec("demo", "stopped", model="sim-b", k=3), actor=operator())
        cancel_run(demo_engine, "stopped")
        assert wait_until_done(demo_engine, "stopped").status == "cancelled"
        # label.created, item.resolved, gold.changed: a label and a resolution
        with session_scope(demo_engine) as session:
            dataset = get_dataset("demo", session=session)
            item = item_db_ids(dataset.id, session=session)["demo-001"]
            save_label(item, session=session, actor=operator(), choice="none_correct", seen=None)
            resolve(item, session=session, actor=operator(), choice="none_correct")
        # batch.collected, then run.capped: `pcf judge` at the wire server
        import_dataset(tmp_path, 2)
        with WireServer(batch_answer, prompt_tokens=100_000) as server:
            judge = [
                *("judge", "ds", "--backend", "openai", "--model", "gpt-test"),
                *("--base-url", server.openai_base_url, "--k", "2"),
            ]
            pcf = CliRunner().invoke
            assert pcf(app, [*judge, "--name", "b", "--batch"]).exit_code == 0
            collected = pcf(app, ["batch", "collect", "b", "--wait", "--poll", "0"])
            assert collected.exit_code == 0, collected.output
            cap = ["--model", "gpt-capped", "--concurrency", "1", "--max-cost", "0.02"]
            capped = pcf(app, [*judge, "--name", "c", *cap])  # another model: no cache hit
            assert capped.exit_code == 1, capped.output
        with session_scope(demo_engine) as session:
            queued = session.exec(select(WebhookDelivery)).all()
        made = deliver_all(demo_engine)
        received = receiver.wait_for(len(queued))
    assert made == len(queued) == len(received)
    verifier = Verifier(hook.secret)
    told = [verifier.verify(r.body, r.headers) for r in received]
    assert set(EVENTS) <= {t["type"] for t in told}
    by_type = {(t["type"], t["data"].get("run")): t["data"] for t in told}
    assert by_type[("run.finished", "fine")]["dataset"] == "demo"
    assert by_type[("run.failed", "stopped")]["status"] == "failed"
    assert by_type[("batch.collected", "b")]["dataset"] == "ds"
    assert by_type[("run.finished", "b")]["status"] == "finished"
    assert by_type[("run.capped", "c")]["dataset"] == "ds"
    gold = next(t["data"] for t in told if t["type"] == "gold.changed")
    assert (gold["item_id"], gold["gold"], gold["previous"]) == ("demo-001", "none_correct", None)
    assert len({r.headers["webhook-id"] for r in received}) == len(received)
    assert all(hook.secret not in r.body for r in received)


def test_a_receiver_that_is_down_gets_each_retry_a_logged_failure_and_a_redelivery(
    demo_engine, monkeypatch, caplog
):
    monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "127.0.0.1")
    with Receiver(status=503) as receiver:
        hook = subscribe(demo_engine, receiver.url, ["item.resolved"])
        with session_scope(demo_engine) as session:
            dataset = get_dataset("demo", session=session)
            item = item_db_ids(dataset.id, session=session)["demo-002"]
            resolve(item, session=session, actor=operator(), choice="none_correct")
        with caplog.at_level(logging.WARNING, logger="pcf.connectors.webhook_sender"):
            assert deliver_all(demo_engine, schedule=(0, 0, 0)) == 4  # one and three retries
        assert len(receiver.received) == 4
        with session_scope(demo_engine) as session:
            (log,) = deliveries(hook.id, session=session, actor=operator())
        assert log.delivery.state == "failed"
        assert [a.status for a in log.attempts] == [503] * 4
        assert all(a.error.startswith("HTTP 503") for a in log.attempts)
        assert "failed after 4 attempts" in caplog.text
        assert hook.secret not in caplog.text
        receiver.status = 200
        with session_scope(demo_engine) as session:
            redeliver_delivery(hook.id, log.delivery.id, session=session, actor=operator())
        assert deliver_all(demo_engine) == 1
        with session_scope(demo_engine) as session:
            (log,) = deliveries(hook.id, session=session, actor=operator())
    assert (log.delivery.state, len(log.attempts), log.attempts[-1].status) == ("delivered", 5, 200)
    first, last = receiver.received[0], receiver.received[-1]
    assert first.headers["webhook-id"] == last.headers["webhook-id"] == log.delivery.message_id
    Verifier(hook.secret).verify(last.body, last.headers)


def test_no_host_the_operator_did_not_name_and_no_redirect_followed(demo_engine, monkeypatch):
    with pytest.raises(WebhookURLError, match="PCF_WEBHOOK_HOSTS"):
        subscribe(demo_engine, "http://127.0.0.1:9/hook")  # nothing is allowed by default
    monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "hooks.example.org")
    for url in ("http://elsewhere.example.org/x", "ftp://hooks.example.org/x", "hooks.example.org"):
        with pytest.raises(WebhookURLError):
            subscribe(demo_engine, url)
    monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "127.0.0.1")
    with Receiver(status=307, headers={"location": "http://elsewhere.example.org/"}) as receiver:
        hook = subscribe(demo_engine, receiver.url, ["label.created"])
        with session_scope(demo_engine) as session:
            dataset = get_dataset("demo", session=session)
            item = item_db_ids(dataset.id, session=session)["demo-003"]
            save_label(item, session=session, actor=operator(), choice="none_correct", seen=None)
        assert deliver_all(demo_engine, schedule=(0,)) == 2
        assert len(receiver.received) == 2  # the redirect was never followed
        monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "hooks.example.org")  # the operator took it off
        with session_scope(demo_engine) as session:
            (log,) = deliveries(hook.id, session=session, actor=operator())
            redeliver_delivery(hook.id, log.delivery.id, session=session, actor=operator())
        assert deliver_all(demo_engine, schedule=()) == 1
        assert len(receiver.received) == 2  # checked again at send time: no request
    with session_scope(demo_engine) as session:
        attempts = session.exec(select(WebhookAttempt).order_by(WebhookAttempt.id)).all()
    assert ["redirected to http://elsewhere" in a.error for a in attempts] == [True, True, False]
    assert attempts[-1].status is None
    assert "not on the operator's allow-list" in attempts[-1].error


def test_a_delivery_taken_by_a_sender_is_not_taken_twice_until_its_claim_runs_out(
    demo_engine, monkeypatch
):
    """A delivery one sender took is not taken by another (the claim is a conditional UPDATE)
    until its claim runs out: a sender killed while sending leaves it to be sent again then
    (at least once, never lost)."""
    monkeypatch.setenv("PCF_WEBHOOK_HOSTS", "hooks.invalid")
    subscribe(demo_engine, "https://hooks.invalid/pcf", ["run.failed"])
    with session_scope(demo_engine) as session:
        queue_event("run.failed", {"run": "r"}, session=session)
    now = utc_now()
    with session_scope(demo_engine) as session:
        taken = claim_due_deliveries(session=session, now=now)
    with session_scope(demo_engine) as session:
        assert claim_due_deliveries(session=session, now=now) == []
        later = now + timedelta(seconds=DELIVERY_CLAIM_S - 1)
        assert claim_due_deliveries(session=session, now=later) == []
    with session_scope(demo_engine) as session:
        expired = now + timedelta(seconds=DELIVERY_CLAIM_S)
        assert claim_due_deliveries(session=session, now=expired) == taken != []
