"""Who labels what next: queues that split the work, and reservations that keep people who
label at once from giving an item more labels than its plan asks.

An annotator's next item is the first, in the order given (most doubtful first) after the plan's
random calibration share (served regardless of doubt, so that its gold is a random sample) and
then the escalated items, that has fewer people's labels and holds than it wants and none of
theirs. Showing it holds it for them
for :data:`RESERVATION` (renewed each time their page shows it again). Ten minutes: long enough
to read a prompt and a few long answers and decide (a label takes seconds to a few minutes),
short enough that an item left on a closed tab goes back to the others soon. A lapsed hold
returns the item to every queue; the label itself is checked again when saved
(:func:`pcf.labelling.labels.save_label` with ``wanted``), so a late save never makes an item
one label too many.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.labelling.plan import Plan, calibration_items, labelling_plan
from pcf.store import (
    hold_item,
    holders_by_item,
    labellers_by_item,
    lock_item,
    release_item,
    utc_now,
)

RESERVATION = timedelta(minutes=10)


@dataclass(frozen=True)
class Claim:
    """The item held for the annotator, and how many items are left in their queue."""

    item_key: str
    item_db_id: int
    left: int


def labels_wanted(
    plan: Plan, item_keys: Sequence[str], doubtful: Collection[str]
) -> dict[str, int]:
    """How many people's labels each item wants: the plan's N; with the adaptive plan, N only
    for the ``doubtful`` items (labels that disagree with each other or with the PCF decision,
    or an instability flag) and one for the rest."""
    n = plan.labels_per_item
    return {key: n if not plan.adaptive or key in doubtful else 1 for key in item_keys}


def _served_first(
    dataset_id: int, order: Sequence[tuple[str, int]], *, session: Session
) -> list[tuple[str, int]]:
    """``order`` with the plan's calibration share first, then its escalated items."""
    reserved = calibration_items(dataset_id, session=session)
    escalated = set(labelling_plan(dataset_id, session=session).escalated)
    return sorted(order, key=lambda entry: (entry[0] not in reserved, entry[0] not in escalated))


def _free(me: str, wanted: int, labellers: set[str], holders: set[str]) -> bool:
    return me not in labellers and len((labellers | holders) - {me}) < wanted


def claim_next(
    dataset_id: int,
    order: Sequence[tuple[str, int]],
    *,
    session: Session,
    actor: Actor,
    wanted: Mapping[str, int],
    skip: Collection[str] = (),
    now: datetime | None = None,
) -> Claim | None:
    """Hold and return ``actor``'s next item, or None when their queue is empty.

    Args:
        dataset_id: the dataset.
        order: ``(item key, item db id)``, most doubtful first.
        session: the open session; the claim is flushed, and the caller commits.
        actor: who labels.
        wanted: people's labels each item wants (:func:`labels_wanted`).
        skip: items put off for now: offered last.
        now: the time (for tests); by default now.

    Raises:
        AccessDeniedError: ``actor`` may not label.
    """
    actor = authorize(actor, Permission.LABEL, session=session)
    now = now or utc_now()
    me = actor.identity
    labellers = labellers_by_item(dataset_id, session=session)
    holders = holders_by_item(dataset_id, session=session, now=now)
    open_items = [
        (key, db_id)
        for key, db_id in _served_first(dataset_id, order, session=session)
        if _free(me, wanted[key], labellers.get(db_id, set()), holders.get(db_id, set()))
    ]
    mine = [entry for entry in open_items if me in holders.get(entry[1], set())]
    rest = [entry for entry in open_items if entry not in mine and entry[0] not in skip]
    later = [entry for entry in open_items if entry not in mine and entry[0] in skip]
    for key, db_id in [*mine, *rest, *later]:
        lock_item(db_id, session=session)
        fresh_labellers = labellers_by_item(dataset_id, session=session, item_db_id=db_id)
        fresh_holders = holders_by_item(dataset_id, session=session, now=now, item_db_id=db_id)
        if _free(
            me, wanted[key], fresh_labellers.get(db_id, set()), fresh_holders.get(db_id, set())
        ):
            hold_item(db_id, me, session=session, until=now + RESERVATION)
            return Claim(key, db_id, len(open_items))
    return None


def release(item_db_id: int, *, session: Session, actor: Actor) -> None:
    """Give the item back to the others' queues (skipped, or labelled)."""
    release_item(item_db_id, actor.identity, session=session)


def queue_left(
    dataset_id: int,
    order: Sequence[tuple[str, int]],
    *,
    session: Session,
    people: Collection[str],
    wanted: Mapping[str, int],
) -> dict[str, int]:
    """How many items each of ``people`` still has in their queue (as :func:`claim_next`
    counts them)."""
    now = utc_now()
    labellers = labellers_by_item(dataset_id, session=session)
    holders = holders_by_item(dataset_id, session=session, now=now)
    return {
        person: sum(
            _free(person, wanted[key], labellers.get(db_id, set()), holders.get(db_id, set()))
            for key, db_id in order
        )
        for person in people
    }
