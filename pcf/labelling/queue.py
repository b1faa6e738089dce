"""Who labels what next: queues that split the work, and reservations that keep people who
label at once from giving an item more labels than its plan asks (docs/reviewing.md, "Queues
that split the work" and "Assignments"). A save is checked again
(:func:`pcf.labelling.labels.save_label` with ``wanted``), so a late one adds no label too many.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence, Sized
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import Session

from pcf.access import Actor, Permission, Role, authorize
from pcf.labelling.plan import Plan, calibration_order, labelling_plan
from pcf.store import (
    Dataset,
    add_audit_event,
    assign_items,
    assignees_by_item,
    get_member,
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
    """The item held for the annotator, and their queue in the order it is served."""

    item_key: str
    item_db_id: int
    queue: tuple[str, ...]


def labels_wanted(
    plan: Plan, item_keys: Sequence[str], doubtful: Collection[str]
) -> dict[str, int]:
    """People's labels each item wants: the plan's N (adaptive: one but for ``doubtful`` items)."""
    n = plan.labels_per_item
    return {key: n if not plan.adaptive or key in doubtful else 1 for key in item_keys}


def _free(
    me: str,
    wanted: int,
    db_id: int,
    labellers: Mapping[int, set[str]],
    holders: Mapping[int, set[str]],
    assignees: Mapping[int, str],
) -> bool:
    done, assignee = labellers.get(db_id, set()), assignees.get(db_id)
    if assignee not in (None, me) and assignee not in done:
        return False  # kept for its assignee until she labels it
    return me not in done and len((done | holders.get(db_id, set())) - {me}) < wanted


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
    """Hold and return ``actor``'s next item of ``order`` (``(item key, item db id)``, most
    doubtful first; ``skip``-ped ones last), or None when their queue is empty."""
    actor = authorize(actor, Permission.LABEL, session=session)
    now = now or utc_now()
    me = actor.identity
    labellers = labellers_by_item(dataset_id, session=session)
    holders = holders_by_item(dataset_id, session=session, now=now)
    assignees = assignees_by_item(dataset_id, session=session)
    reserved = {key: n for n, key in enumerate(calibration_order(dataset_id, session=session))}
    escalated = set(labelling_plan(dataset_id, session=session).escalated)

    def rank(entry: tuple[str, int]) -> tuple[int, bool, int, bool]:
        """Held, then assigned, then not skipped; then the plan's calibration share in its
        random order, then escalated items."""
        key, db_id = entry
        mine = 0 if me in holders.get(db_id, set()) else 1 if assignees.get(db_id) == me else 2
        skipped = mine + (mine == 2 and key in skip)
        return skipped, key not in reserved, reserved.get(key, 0), key not in escalated

    free = [(k, i) for k, i in order if _free(me, wanted[k], i, labellers, holders, assignees)]
    served = sorted(free, key=rank)
    for key, db_id in served:
        lock_item(db_id, session=session)
        fresh_labellers = labellers_by_item(dataset_id, session=session, item_db_id=db_id)
        fresh_holders = holders_by_item(dataset_id, session=session, now=now, item_db_id=db_id)
        if _free(me, wanted[key], db_id, fresh_labellers, fresh_holders, assignees):
            hold_item(db_id, me, session=session, until=now + RESERVATION)
            return Claim(key, db_id, tuple(k for k, _ in served))
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
    """How many items each of ``people`` still has in their queue."""
    labellers = labellers_by_item(dataset_id, session=session)
    holders = holders_by_item(dataset_id, session=session, now=utc_now())
    assignees = assignees_by_item(dataset_id, session=session)
    return {
        person: sum(
            _free(person, wanted[key], db_id, labellers, holders, assignees) for key, db_id in order
        )
        for person in people
    }


def assign(
    dataset_id: int,
    order: Sequence[tuple[str, int]],
    *,
    session: Session,
    actor: Actor,
    to: str,
    items: Collection[str] = (),
    first: int = 0,
    share: float = 0.0,
) -> list[str]:
    """Give the member ``to`` the ``items`` named (taken from any other assignee), or else the
    first ``first`` (or the ``share`` of the dataset's) items of ``order`` nobody is assigned
    or labelled; their keys, in ``order``.

    Raises:
        ValueError: ``to`` is no member who may label, an unknown item, or a share outside 0..1.
    """
    actor = authorize(actor, Permission.ASSIGN, session=session)
    member = get_member(to, session=session)
    if member is None or not Actor(to, Role(member.role)).may(Permission.LABEL):
        raise ValueError(f"{to} is no member who may label; add them on Members first")
    to = member.email
    if not 0 <= share <= 1:
        raise ValueError(f"the share must be between 0 and 1, got {share}")
    db_ids = dict(order)
    if unknown := sorted(set(items) - db_ids.keys()):
        raise ValueError(f"no item {', '.join(unknown[:5])} in this dataset")
    if not items:
        taken = assignees_by_item(dataset_id, session=session)
        labelled = labellers_by_item(dataset_id, session=session)
        n = first or round(share * len(order))
        items = [k for k, i in order if i not in taken and i not in labelled][:n]
    picked = set(items)
    chosen = [key for key in db_ids if key in picked]
    assign_items([db_ids[k] for k in chosen], to, session=session, assigned_by=actor.identity)
    _audit("items_assigned", dataset_id, session=session, actor=actor, to=to, items=chosen)
    return chosen


def unassign(dataset_id: int, person: str, *, session: Session, actor: Actor) -> int:
    """Take every item of the dataset assigned to ``person`` back; how many there were."""
    actor = authorize(actor, Permission.ASSIGN, session=session)
    assigned = assignees_by_item(dataset_id, session=session).items()
    ids = [i for i, p in assigned if p.lower() == person.lower()]
    assign_items(ids, None, session=session, assigned_by=actor.identity)
    _audit("assignments_removed", dataset_id, session=session, actor=actor, to=person, items=ids)
    return len(ids)


def _audit(
    action: str, dataset_id: int, *, session: Session, actor: Actor, to: str, items: Sized
) -> None:
    dataset = session.get(Dataset, dataset_id)
    target = dataset.name if dataset is not None else str(dataset_id)
    details = {"to": to, "items": len(items)}
    add_audit_event(action, session=session, actor=actor.identity, target=target, details=details)


def assignment_progress(dataset_id: int, *, session: Session) -> dict[str, tuple[int, int]]:
    """``{person: (assigned items she labelled, items assigned to her)}``."""
    labellers = labellers_by_item(dataset_id, session=session)
    progress: dict[str, tuple[int, int]] = {}
    for db_id, person in assignees_by_item(dataset_id, session=session).items():
        done, total = progress.get(person, (0, 0))
        progress[person] = (done + (person in labellers.get(db_id, set())), total + 1)
    return progress
