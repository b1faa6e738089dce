"""Webhooks: subscriptions to events, an outbox and its sender.

The events are queued by the store functions that make the change (a run's status, a batch
collected, a label, a resolution) in the same transaction, so they fire whether the change
came from the CLI, a page or the API, and a change rolled back sends nothing. A sender
(:func:`deliver_due`: the API's server runs :class:`Sender` in a thread; ``pcf webhooks
deliver`` runs it headless) POSTs each delivery signed per Standard Webhooks, retries it on
:data:`RETRY_SCHEDULE_S`, and logs every attempt. Only hosts on ``PCF_WEBHOOK_HOSTS`` are ever
asked, at creation and again at each send; a redirect is never followed."""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import httpx
from sqlalchemy import Engine
from sqlmodel import Session
from standardwebhooks import Webhook as Signer

from pcf.access import Actor, Permission, authorize
from pcf.store import (
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    add_audit_event,
    add_webhook,
    claim_due_deliveries,
    delete_webhook,
    delivery_attempts,
    get_delivery,
    get_webhook,
    list_webhooks,
    record_attempt,
    redeliver,
    session_scope,
    storage_problem,
    utc_now,
    webhook_deliveries,
)

logger = logging.getLogger(__name__)

Event = Literal[
    "run.finished",
    "run.capped",
    "run.failed",
    "batch.collected",
    "label.created",
    "item.resolved",
    "gold.changed",
]
EVENTS: tuple[str, ...] = get_args(Event)
HOSTS_ENV = "PCF_WEBHOOK_HOSTS"
RETRY_SCHEDULE_S = (10, 60, 600, 3600, 21600)
"""The waits before each retry after a failed first attempt: 10 s, 1 min, 10 min, 1 h, 6 h
(six attempts over about 7 hours), then the delivery is failed (redeliver it by hand)."""
POLL_ENV = "PCF_WEBHOOK_POLL_S"
POLL_S = 2.0
TIMEOUT_S = 10.0


class WebhookURLError(ValueError):
    """A webhook URL that is not http(s) or whose host is not on ``PCF_WEBHOOK_HOSTS``."""


def allowed_hosts() -> frozenset[str]:
    """The hosts the operator allows webhooks to (``PCF_WEBHOOK_HOSTS``, comma-separated;
    ``host`` or ``host:port``); none by default."""
    named = os.environ.get(HOSTS_ENV, "").split(",")
    return frozenset(host.strip().lower() for host in named if host.strip())


def check_url(url: str) -> str:
    """``url`` when it is http(s) to a host on the allow-list, else WebhookURLError saying why."""
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError as exc:
        raise WebhookURLError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise WebhookURLError("give an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise WebhookURLError("a webhook URL must not hold a user or password")
    hosts = allowed_hosts()
    if host not in hosts and f"{host}:{port}" not in hosts:
        raise WebhookURLError(
            f"host {host!r} is not on the operator's allow-list {HOSTS_ENV} "
            f"({', '.join(sorted(hosts)) or 'empty: no webhook is allowed'})"
        )
    return url


def check_events(events: Sequence[str]) -> list[str]:
    """``events`` without repeats, when each is known and there is one; else ValueError."""
    if unknown := [e for e in events if e not in EVENTS]:
        raise ValueError(f"unknown event(s) {', '.join(unknown)}; choose from {', '.join(EVENTS)}")
    if not events:
        raise ValueError(f"name at least one event of {', '.join(EVENTS)}")
    return list(dict.fromkeys(events))


def new_secret() -> str:
    """A signing secret in the Standard Webhooks form: ``whsec_`` and 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def create_webhook(url: str, events: Sequence[str], *, session: Session, actor: Actor) -> Webhook:
    """A new subscription of ``url`` to ``events``, as ``actor`` (who may manage webhooks);
    its ``secret`` is for the caller to show once.

    Raises:
        WebhookURLError: the URL is not http(s) or its host is not allowed.
        ValueError: no event, or an unknown one.
    """
    actor = authorize(actor, Permission.MANAGE_WEBHOOKS, session=session)
    url, events = check_url(url), check_events(events)
    webhook = add_webhook(
        session=session, url=url, events=events, secret=new_secret(), created_by=actor.identity
    )
    add_audit_event("webhook_created", session=session, actor=actor.identity, target=url)
    return webhook


def webhooks(*, session: Session, actor: Actor) -> list[Webhook]:
    """Every subscription, oldest first."""
    authorize(actor, Permission.MANAGE_WEBHOOKS, session=session)
    return list_webhooks(session=session)


def webhook(webhook_id: int, *, session: Session, actor: Actor) -> Webhook | None:
    """The subscription ``webhook_id``, or None."""
    authorize(actor, Permission.MANAGE_WEBHOOKS, session=session)
    return get_webhook(webhook_id, session=session)


def remove_webhook(webhook_id: int, *, session: Session, actor: Actor) -> bool:
    """Delete the subscription and its delivery log; whether it existed."""
    actor = authorize(actor, Permission.MANAGE_WEBHOOKS, session=session)
    found = delete_webhook(webhook_id, session=session)
    if found:
        target = str(webhook_id)
        add_audit_event("webhook_deleted", session=session, actor=actor.identity, target=target)
    return found


@dataclass(frozen=True)
class DeliveryLog:
    """A delivery and its attempts, oldest first."""

    delivery: WebhookDelivery
    attempts: list[WebhookAttempt]


def deliveries(webhook_id: int, *, session: Session, actor: Actor) -> list[DeliveryLog] | None:
    """The subscription's deliveries, newest first, each with its attempts; None when there
    is no such subscription."""
    authorize(actor, Permission.MANAGE_WEBHOOKS, session=session)
    if get_webhook(webhook_id, session=session) is None:
        return None
    found = webhook_deliveries(webhook_id, session=session)
    attempts = delivery_attempts([d.id for d in found], session=session)
    return [DeliveryLog(d, [a for a in attempts if a.delivery_id == d.id]) for d in found]


def redeliver_delivery(
    webhook_id: int, delivery_id: int, *, session: Session, actor: Actor
) -> WebhookDelivery | None:
    """Queue the subscription's delivery again (same ``webhook-id``, a fresh retry schedule);
    None when the subscription has no such delivery."""
    authorize(actor, Permission.MANAGE_WEBHOOKS, session=session)
    delivery = get_delivery(delivery_id, session=session)
    if delivery is None or delivery.webhook_id != webhook_id:
        return None
    return redeliver(delivery, session=session)


def deliver_due(
    engine: Engine,
    *,
    schedule: Sequence[float] = RETRY_SCHEDULE_S,
    http: httpx.Client | None = None,
) -> int:
    """Make one attempt at each delivery due now; how many attempts were made. ``schedule``
    is the waits before each retry (its length bounds the retries)."""
    with session_scope(engine) as session:
        claimed = claim_due_deliveries(session=session, now=utc_now())
    if not claimed:
        return 0
    client = http or httpx.Client(timeout=TIMEOUT_S, follow_redirects=False)
    try:
        for delivery_id in claimed:
            _attempt(engine, delivery_id, schedule, client)
    finally:
        if http is None:
            client.close()
    return len(claimed)


def _attempt(
    engine: Engine, delivery_id: int, schedule: Sequence[float], client: httpx.Client
) -> None:
    """Send one delivery once and log the attempt."""
    with session_scope(engine) as session:
        delivery = get_delivery(delivery_id, session=session)
        hook = get_webhook(delivery.webhook_id, session=session) if delivery else None
        if delivery is None or hook is None:
            return  # deleted meanwhile
        url, secret, message_id = hook.url, hook.secret, delivery.message_id
        body = json.dumps(delivery.payload, separators=(",", ":"))
    status, error = send(url, secret, message_id, body, client)
    with session_scope(engine) as session:
        delivery = get_delivery(delivery_id, session=session)
        if delivery is None:
            return
        retries_left = delivery.attempts < len(schedule)
        retry_at = None
        if error and retries_left:
            retry_at = utc_now() + timedelta(seconds=schedule[delivery.attempts])
        record_attempt(delivery, session=session, status=status, error=error, retry_at=retry_at)
        if error and retry_at is None:
            logger.warning(
                "webhook %s: delivery %s (%s) failed after %s attempts: %s",
                delivery.webhook_id,
                delivery.id,
                delivery.event,
                delivery.attempts,
                error,
            )


def send(
    url: str, secret: str, message_id: str, body: str, client: httpx.Client
) -> tuple[int | None, str]:
    """POST ``body`` signed per Standard Webhooks; the receiver's status (None when none came)
    and the error ("" for a 2xx)."""
    try:
        check_url(url)
    except WebhookURLError as exc:
        return None, str(exc)
    at = utc_now()
    headers = {
        "content-type": "application/json",
        "user-agent": "pcf-review-webhooks",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Signer(secret).sign(message_id, at, body),
    }
    try:
        answer = client.post(url, content=body.encode(), headers=headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if answer.is_success:
        return answer.status_code, ""
    if answer.is_redirect:
        where = answer.headers.get("location", "?")
        return answer.status_code, f"redirected to {where}; redirects are not followed"
    return answer.status_code, f"HTTP {answer.status_code}: {answer.text[:200]}"


class Sender:
    """A thread that calls :func:`deliver_due` every ``PCF_WEBHOOK_POLL_S`` seconds (2 by
    default) until :meth:`stop`: the API server's sender."""

    def __init__(self, engine: Engine, *, poll_s: float | None = None) -> None:
        self.engine = engine
        self.poll_s = poll_s or float(os.environ.get(POLL_ENV) or POLL_S) or POLL_S
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="webhook-sender", daemon=True)

    def start(self) -> Sender:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(TIMEOUT_S * 2)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                while deliver_due(self.engine) and not self.stopping.is_set():
                    pass
            except Exception as exc:
                problem = storage_problem(exc, self.engine.url.render_as_string())
                if problem is None:
                    logger.exception("webhook sender: this round failed; trying again")
                else:
                    logger.warning("webhook sender: the database cannot be used: %s", problem)
            self.stopping.wait(self.poll_s)


def server_sender(engine: Engine) -> Sender | None:
    """The API server's sender, started; None when ``PCF_WEBHOOK_POLL_S`` is 0 (the operator
    runs ``pcf webhooks deliver --watch`` instead, e.g. one sender for several servers)."""
    poll_s = float(os.environ.get(POLL_ENV) or POLL_S)
    return Sender(engine, poll_s=poll_s).start() if poll_s > 0 else None


def webhook_record(hook: Webhook) -> dict[str, Any]:
    """A subscription as the API and the CLI show it (never its secret)."""
    return {
        "id": hook.id,
        "url": hook.url,
        "events": hook.events,
        "created_by": hook.created_by,
        "created_at": hook.created_at,
    }
