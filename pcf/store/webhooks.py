"""The webhooks' tables: subscriptions, the outbox of events (a delivery per event and
webhook, written in the transaction of the change it tells) and each attempt to send one.
Functions flush, never commit."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from pcf.store.datasets import rows_changed
from pcf.store.models import (
    Dataset,
    ItemRow,
    Run,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    saved,
    utc_now,
)

RUN_EVENTS = frozenset({"finished", "capped", "failed"})
"""The run statuses that queue a ``run.<status>`` event."""
DELIVERY_CLAIM_S = 120
"""How long a sender holds a delivery it is sending before another sender may take it."""


def add_webhook(
    *, session: Session, url: str, events: list[str], secret: str, created_by: str
) -> Webhook:
    """Store a new subscription."""
    webhook = Webhook(url=url, events=events, secret=secret, created_by=created_by)
    return saved(webhook, session=session)


def list_webhooks(*, session: Session) -> list[Webhook]:
    """Every subscription, oldest first."""
    return list(session.exec(select(Webhook).order_by(col(Webhook.id))).all())


def get_webhook(webhook_id: int, *, session: Session) -> Webhook | None:
    """The subscription ``webhook_id``, or None."""
    return session.get(Webhook, webhook_id)


def delete_webhook(webhook_id: int, *, session: Session) -> bool:
    """Delete the subscription with its deliveries and their attempts; whether it existed."""
    deliveries = select(WebhookDelivery.id).where(WebhookDelivery.webhook_id == webhook_id)
    session.execute(delete(WebhookAttempt).where(col(WebhookAttempt.delivery_id).in_(deliveries)))
    session.execute(delete(WebhookDelivery).where(col(WebhookDelivery.webhook_id) == webhook_id))
    deleted = session.execute(delete(Webhook).where(col(Webhook.id) == webhook_id))
    session.flush()
    return rows_changed(deleted) == 1


def queue_event(event: str, data: dict[str, Any], *, session: Session) -> int:
    """Write ``event`` for each subscription that wants it into the outbox, in the caller's
    transaction (a sender delivers it once that commits); how many deliveries were written."""
    wanted = [w for w in list_webhooks(session=session) if event in w.events]
    payload = {"type": event, "timestamp": utc_now().isoformat(), "data": data}
    for webhook in wanted:
        delivery = WebhookDelivery(
            webhook_id=webhook.id,
            message_id=f"msg_{uuid.uuid4().hex}",
            event=event,
            payload=payload,
        )
        session.add(delivery)
    session.flush()
    return len(wanted)


def wants(event: str, *, session: Session) -> bool:
    """Whether a subscription wants ``event`` (so its data is worth reading)."""
    return any(event in w.events for w in list_webhooks(session=session))


def run_event(run: Run, event: str, *, session: Session) -> None:
    """Queue ``event`` (``run.*``, ``batch.collected``) about ``run``."""
    if not wants(event, session=session):
        return
    dataset = session.get(Dataset, run.dataset_id)
    data = {"run": run.name, "dataset": dataset.name if dataset else None, "status": run.status}
    queue_event(event, data, session=session)


def item_event(item_db_id: int, event: str, data: dict[str, Any], *, session: Session) -> None:
    """Queue ``event`` about an item, its dataset's name and the item's id added to ``data``."""
    if not wants(event, session=session):
        return
    item = session.get(ItemRow, item_db_id)
    dataset = session.get(Dataset, item.dataset_id) if item else None
    where = {"dataset": dataset.name if dataset else None, "item_id": item and item.item_key}
    queue_event(event, where | data, session=session)


def webhook_deliveries(webhook_id: int, *, session: Session) -> list[WebhookDelivery]:
    """The subscription's deliveries, newest first."""
    query = select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id)
    return list(session.exec(query.order_by(col(WebhookDelivery.id).desc())).all())


def get_delivery(delivery_id: int, *, session: Session) -> WebhookDelivery | None:
    """The delivery ``delivery_id``, or None."""
    return session.get(WebhookDelivery, delivery_id)


def delivery_attempts(delivery_ids: list[int], *, session: Session) -> list[WebhookAttempt]:
    """The attempts of these deliveries, oldest first."""
    query = select(WebhookAttempt).where(col(WebhookAttempt.delivery_id).in_(delivery_ids))
    return list(session.exec(query.order_by(col(WebhookAttempt.id))).all())


def claim_due_deliveries(*, session: Session, now: datetime, limit: int = 50) -> list[int]:
    """Take the pending deliveries due by ``now`` for this sender (each held for
    :data:`DELIVERY_CLAIM_S`, so that a second sender at once skips it); their ids, oldest first."""
    query = (
        select(WebhookDelivery.id, WebhookDelivery.next_attempt_at)
        .where(WebhookDelivery.state == "pending", col(WebhookDelivery.next_attempt_at) <= now)
        .order_by(col(WebhookDelivery.next_attempt_at), col(WebhookDelivery.id))
        .limit(limit)
    )
    claimed = []
    for delivery_id, due in session.exec(query).all():
        taken = session.execute(
            update(WebhookDelivery)
            .where(col(WebhookDelivery.id) == delivery_id)
            .where(col(WebhookDelivery.next_attempt_at) == due)
            .where(col(WebhookDelivery.state) == "pending")
            .values(next_attempt_at=now + timedelta(seconds=DELIVERY_CLAIM_S))
            .execution_options(synchronize_session=False)
        )
        if rows_changed(taken) == 1:
            claimed.append(delivery_id)
    session.flush()
    return claimed


def record_attempt(
    delivery: WebhookDelivery,
    *,
    session: Session,
    status: int | None,
    error: str,
    retry_at: datetime | None,
) -> WebhookAttempt:
    """Log one attempt to send ``delivery``: delivered when ``error`` is empty, else pending
    until ``retry_at``, or failed when None (the last retry)."""
    now = utc_now()
    attempt = saved(
        WebhookAttempt(delivery_id=delivery.id, status=status, error=error, at=now),
        session=session,
    )
    delivery.attempts += 1
    if not error:
        delivery.state, delivery.finished_at = "delivered", now
    elif retry_at is None:
        delivery.state, delivery.finished_at = "failed", now
    else:
        delivery.next_attempt_at = retry_at
    saved(delivery, session=session)
    return attempt


def redeliver(delivery: WebhookDelivery, *, session: Session) -> WebhookDelivery:
    """Send the delivery again from its first attempt (its earlier attempts stay logged)."""
    delivery.state, delivery.attempts, delivery.finished_at = "pending", 0, None
    delivery.next_attempt_at = utc_now()
    return saved(delivery, session=session)
