"""Reviewers turn disagreeing labels into gold: a resolution is a new record (who, when,
choice, reason) that never overwrites a vote."""

from __future__ import annotations

from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.items import NONE_CORRECT
from pcf.store import Resolution, add_resolution, load_item

MAX_REASON_CHARS = 10_000


def resolve(
    item_db_id: int, *, session: Session, actor: Actor, choice: str, reason: str = ""
) -> Resolution:
    """Set the item's gold to ``choice`` (one of its candidates, or ``none_correct``).

    Raises:
        AccessDeniedError: ``actor`` may not resolve disagreements (reviewers and admins may).
        ValueError: no such item, a choice the item does not offer, or an overlong reason.
    """
    actor = authorize(actor, Permission.RESOLVE, session=session)
    item = load_item(item_db_id, session=session)
    if item is None:
        raise ValueError(f"no item with database id {item_db_id}")
    if choice not in (*item.candidate_ids, NONE_CORRECT):
        raise ValueError(
            f"choice {choice!r} is not one of: {', '.join([*item.candidate_ids, NONE_CORRECT])}"
        )
    reason = reason.strip()
    if len(reason) > MAX_REASON_CHARS or "\x00" in reason:
        raise ValueError(f"the reason must be at most {MAX_REASON_CHARS:,} characters, no NUL")
    return add_resolution(
        item_db_id, session=session, choice=choice, reason=reason, resolved_by=actor.identity
    )
