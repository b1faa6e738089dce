"""The audit log, for admins: who did what, when."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from pcf.access import Actor, Permission
from pcf.store import audit_events

AUDIT_COLUMNS = ("at", "actor", "action", "target", "details")


def audit_log(*, session: Session, actor: Actor, limit: int | None = None) -> list[dict[str, Any]]:
    """The audit log, newest first, as records of :data:`AUDIT_COLUMNS`."""
    actor.require(Permission.READ_AUDIT)
    return [
        {column: getattr(event, column) for column in AUDIT_COLUMNS} | {"at": event.at.isoformat()}
        for event in audit_events(session=session, limit=limit)
    ]
