"""Labels saved as the signed-in person, and what of an item's labels a person may see."""

from __future__ import annotations

from collections.abc import Iterable

from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.store import (
    Adjudication,
    add_adjudication,
    adjudication_history,
    latest_label,
    lock_item,
    release_item,
)


class ItemFullError(ValueError):
    """The item has all the people's labels its plan asks for; nothing was saved."""


class LabelChangedError(ValueError):
    """The person's label of the item changed since their page showed it (another tab saved);
    nothing was saved. ``label_id`` and ``choice`` are the label now stored."""

    def __init__(self, current: Adjudication) -> None:
        super().__init__(
            f"you already saved a label for this item elsewhere ({current.choice}, at "
            f"{current.created_at:%H:%M:%S} UTC); nothing was saved: look at it and save again "
            "to correct it"
        )
        self.label_id = current.id
        self.choice = current.choice


def save_label(
    item_db_id: int,
    *,
    session: Session,
    actor: Actor,
    choice: str,
    seen: int | None,
    confidence: float | None = None,
    tags: Iterable[str] = (),
    notes: str = "",
    wanted: int | None = None,
) -> Adjudication:
    """Save ``actor``'s label of the item (a correction if they labelled it before); end their hold.

    Args:
        seen: the id of the actor's label that their page showed (None: none), so that a
            second tab's save never silently lands on top of the first.
        wanted: how many people's labels the item wants (None: no limit).

    Raises:
        LabelChangedError: the actor's stored label is no longer the one ``seen``.
        ItemFullError: others gave the item every label it wants meanwhile.
        ValueError: a choice the item does not offer, or another bad field.
        LostRaceError: another save of the same person raced this one (try again).
    """
    actor = authorize(actor, Permission.LABEL, session=session)
    lock_item(item_db_id, session=session)
    current = latest_label(item_db_id, actor.identity, session=session)
    if current is None and seen is not None:
        raise ValueError("the label your page showed is gone; reload the page")
    if current is not None and current.id != seen:
        raise LabelChangedError(current)
    if wanted is not None and current is None:
        others = {a.annotator for a in adjudication_history(item_db_id, session=session)}
        if len(others) >= wanted:
            raise ItemFullError(
                f"this item already has the {wanted} label(s) its plan asks for; nothing was "
                "saved, and the next item is yours"
            )
    release_item(item_db_id, actor.identity, session=session)
    return add_adjudication(
        item_db_id,
        session=session,
        annotator=actor.identity,
        choice=choice,
        confidence=confidence,
        tags=tags,
        notes=notes,
    )


def visible_history(item_db_id: int, *, session: Session, actor: Actor) -> list[Adjudication]:
    """The item's labels that ``actor`` may see, oldest first: an annotator only their own (so
    that no one else's can sway theirs)."""
    history = adjudication_history(item_db_id, session=session)
    if actor.may(Permission.SEE_RESULTS):
        return history
    return [label for label in history if label.annotator == actor.identity]
