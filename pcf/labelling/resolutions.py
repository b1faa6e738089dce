"""Reviewers turn disagreeing labels into gold: a resolution is a new record that never
overwrites a vote. Each item has a thread of comments to discuss it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sqlmodel import Session

from pcf.access import AccessDeniedError, Actor, Permission, authorize
from pcf.items import NONE_CORRECT, RESERVED_CANDIDATE_IDS
from pcf.store import (
    Comment,
    Resolution,
    add_comment,
    add_resolution,
    item_comments,
    latest_label,
    load_item,
)

MAX_REASON_CHARS = 10_000


def resolve(
    item_db_id: int, *, session: Session, actor: Actor, choice: str, reason: str = ""
) -> Resolution:
    """Set the item's gold to ``choice`` (one of its candidates, or ``none_correct``).

    Raises:
        ValueError: no such item, a choice the item does not offer, or an overlong reason.
    """
    actor = authorize(actor, Permission.RESOLVE, session=session)
    item = load_item(item_db_id, session=session)
    if item is None:
        raise ValueError(f"no item with database id {item_db_id}")
    if choice not in (options := (*item.candidate_ids, NONE_CORRECT)):
        raise ValueError(f"choice {choice!r} is not one of: {', '.join(options)}")
    return add_resolution(
        item_db_id,
        session=session,
        choice=choice,
        reason=checked_text(reason, "reason"),
        resolved_by=actor.identity,
    )


def checked_text(text: str, what: str) -> str:
    """``text`` stripped; a ValueError naming ``what`` when it is overlong or holds a NUL."""
    text = text.strip()
    if len(text) > MAX_REASON_CHARS or "\x00" in text:
        raise ValueError(f"the {what} must be at most {MAX_REASON_CHARS:,} characters, no NUL")
    return text


def contested(choices: Iterable[str]) -> list[str]:
    """The two most-voted candidates of an item's current votes, most first (ties in order)."""
    counted = Counter(c for c in choices if c not in RESERVED_CANDIDATE_IDS)
    return [choice for choice, _ in counted.most_common(2)]


def sees_thread(item_db_id: int, *, session: Session, actor: Actor) -> bool:
    """Whether ``actor`` may read and add to the item's thread: those who resolve, and those who
    saved their own label of it (so that no comment sways it)."""
    return actor.may(Permission.RESOLVE) or (
        actor.may(Permission.LABEL)
        and latest_label(item_db_id, actor.identity, session=session) is not None
    )


def thread(item_db_id: int, *, session: Session, actor: Actor) -> list[Comment] | None:
    """The item's comments, oldest first; None for one who may not see them yet."""
    if not sees_thread(item_db_id, session=session, actor=actor):
        return None
    return item_comments(item_db_id, session=session)


def comment(item_db_id: int, *, session: Session, actor: Actor, text: str) -> Comment:
    """Add ``text`` to the item's thread as ``actor``.

    Raises:
        AccessDeniedError: ``actor`` may neither resolve nor has labelled the item yet.
        ValueError: an empty or overlong comment.
    """
    actor = authorize(actor, Permission.LABEL, session=session)
    if not sees_thread(item_db_id, session=session, actor=actor):
        raise AccessDeniedError(
            f"{actor.identity} may comment on an item only after saving their own label of it"
        )
    if not (text := checked_text(text, "comment")):
        raise ValueError("the comment is empty")
    return add_comment(item_db_id, session=session, author=actor.identity, text=text)
