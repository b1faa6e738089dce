"""The webhook routes (``/webhooks``): subscribe a URL on the operator's allow-list to events,
read each delivery's attempts, send one again. Each calls :mod:`pcf.connectors.webhook_sender`;
an admin's token (``admin`` scope, ``admin`` role) may use them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from pcf.access import Permission
from pcf.api.guard import caller
from pcf.api.problem_details import NotFoundError
from pcf.connectors.webhook_sender import (
    EVENTS,
    DeliveryLog,
    Event,
    check_url,
    create_webhook,
    deliveries,
    redeliver_delivery,
    remove_webhook,
    webhook,
    webhook_record,
    webhooks,
)
from pcf.labelling.tokens import TokenUser
from pcf.store import WebhookDelivery, get_engine, session_scope

router = APIRouter(tags=["webhooks"])
Admin = Annotated[TokenUser, Depends(caller(Permission.MANAGE_WEBHOOKS))]
WebhookId = Annotated[int, Path(ge=1, le=2**31 - 1)]


class WebhookIn(BaseModel):
    """A subscription to make: the URL (its host on the operator's ``PCF_WEBHOOK_HOSTS``)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2000)
    events: list[Event] = Field(min_length=1, max_length=len(EVENTS))

    @field_validator("url")
    @classmethod
    def _allowed(cls, url: str) -> str:
        return check_url(url)


class WebhookOut(BaseModel):
    """A subscription (its secret is shown once, at creation)."""

    id: int
    url: str
    events: list[str]
    created_by: str
    created_at: datetime


class WebhookCreated(WebhookOut):
    """A new subscription and its signing secret (``whsec_...``), shown this once."""

    secret: str


class WebhookList(BaseModel):
    webhooks: list[WebhookOut]


class AttemptOut(BaseModel):
    """One attempt: the receiver's status (null when none came) and the error ("" if none)."""

    status: int | None
    error: str
    at: datetime


class DeliveryOut(BaseModel):
    """One event sent to a subscription: ``pending``, ``delivered`` or ``failed``."""

    id: int
    webhook_id: int
    message_id: str
    event: str
    state: str
    payload: dict[str, Any]
    created_at: datetime
    next_attempt_at: datetime | None
    finished_at: datetime | None
    attempts: list[AttemptOut]


class DeliveryList(BaseModel):
    deliveries: list[DeliveryOut]


def delivery_out(delivery: WebhookDelivery, log: DeliveryLog | None = None) -> DeliveryOut:
    attempts = (
        [AttemptOut(status=a.status, error=a.error, at=a.at) for a in log.attempts] if log else []
    )
    return DeliveryOut(
        id=delivery.id,
        webhook_id=delivery.webhook_id,
        message_id=delivery.message_id,
        event=delivery.event,
        state=delivery.state,
        payload=delivery.payload,
        created_at=delivery.created_at,
        next_attempt_at=delivery.next_attempt_at if delivery.state == "pending" else None,
        finished_at=delivery.finished_at,
        attempts=attempts,
    )


def missing(webhook_id: int) -> NotFoundError:
    return NotFoundError(f"no webhook {webhook_id}; GET /webhooks lists them")


@router.post("/webhooks", response_model=WebhookCreated, status_code=201)
def post_webhook(body: WebhookIn, user: Admin) -> WebhookCreated:
    """Subscribe ``url`` to ``events``; the answer holds the signing secret, shown this once."""
    with session_scope(get_engine()) as session:
        made = create_webhook(body.url, body.events, session=session, actor=user.actor)
    return WebhookCreated(**webhook_record(made), secret=made.secret)


@router.get("/webhooks", response_model=WebhookList)
def get_webhooks(user: Admin) -> WebhookList:
    """Every subscription, oldest first."""
    with session_scope(get_engine()) as session:
        found = webhooks(session=session, actor=user.actor)
    return WebhookList(webhooks=[WebhookOut(**webhook_record(w)) for w in found])


@router.get("/webhooks/{webhook_id}", response_model=WebhookOut)
def get_webhook(webhook_id: WebhookId, user: Admin) -> WebhookOut:
    """One subscription."""
    with session_scope(get_engine()) as session:
        found = webhook(webhook_id, session=session, actor=user.actor)
    if found is None:
        raise missing(webhook_id)
    return WebhookOut(**webhook_record(found))


@router.delete("/webhooks/{webhook_id}", status_code=204, response_class=Response)
def delete_webhook(webhook_id: WebhookId, user: Admin) -> Response:
    """Delete a subscription and its delivery log."""
    with session_scope(get_engine()) as session:
        found = remove_webhook(webhook_id, session=session, actor=user.actor)
    if not found:
        raise missing(webhook_id)
    return Response(status_code=204)


@router.get("/webhooks/{webhook_id}/deliveries", response_model=DeliveryList)
def get_deliveries(webhook_id: WebhookId, user: Admin) -> DeliveryList:
    """The subscription's deliveries, newest first, each with its attempts."""
    with session_scope(get_engine()) as session:
        found = deliveries(webhook_id, session=session, actor=user.actor)
    if found is None:
        raise missing(webhook_id)
    return DeliveryList(deliveries=[delivery_out(log.delivery, log) for log in found])


@router.post(
    "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    response_model=DeliveryOut,
    status_code=202,
)
def post_redeliver(webhook_id: WebhookId, delivery_id: WebhookId, user: Admin) -> DeliveryOut:
    """Send a delivery again (the same ``webhook-id``, a fresh retry schedule)."""
    with session_scope(get_engine()) as session:
        queued = redeliver_delivery(webhook_id, delivery_id, session=session, actor=user.actor)
    if queued is None:
        raise NotFoundError(f"webhook {webhook_id} has no delivery {delivery_id}")
    return delivery_out(queued)
