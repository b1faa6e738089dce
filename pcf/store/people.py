"""The people side: labels (adjudications), members, the audit log, labelling plans, item
reservations, assignments, resolutions and comments. Functions flush, never commit."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

import pandas as pd
from sqlalchemy import (
    delete,
    distinct,
    func,
    insert,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from pcf.identities import IdentityError, identity_key
from pcf.items import RESERVED_CANDIDATE_IDS
from pcf.store.datasets import rows_changed
from pcf.store.engine import LostRaceError
from pcf.store.models import (
    Adjudication,
    Assignment,
    AuditEvent,
    CandidateRow,
    Comment,
    Dataset,
    ItemHold,
    ItemRow,
    LabellingPlan,
    Member,
    Resolution,
    saved,
    utc_now,
)
from pcf.store.webhooks import item_event, wants

LABEL_COLUMNS = (
    "item_key",
    "item_db_id",
    "annotator",
    "choice",
    "confidence",
    "tags",
    "notes",
    "created_at",
    "adjudication_id",
)


def add_adjudication(
    item_db_id: int,
    *,
    session: Session,
    annotator: str,
    choice: str,
    confidence: float | None = None,
    tags: Iterable[str] = (),
    notes: str = "",
) -> Adjudication:
    """Record a human label as a new row that supersedes the annotator's previous label.

    Raises:
        ValueError: unknown item, empty annotator, a choice the item does not offer, a
            confidence outside [0, 1], or a NUL character (PostgreSQL stores none).
        LostRaceError: another session saved the annotator's label of the item at the same
            time; tried again (:func:`~pcf.store.engine.write_with_retry`), this one supersedes it.
    """
    keys = session.exec(
        select(CandidateRow.candidate_key).where(CandidateRow.item_id == item_db_id)
    ).all()
    if not keys:
        raise ValueError(f"no item with database id {item_db_id}")
    if not annotator.strip():
        raise ValueError("say who is annotating: the annotator name is empty")
    if choice not in keys and choice not in RESERVED_CANDIDATE_IDS:
        options = ", ".join([*keys, *RESERVED_CANDIDATE_IDS])
        raise ValueError(f"choice {choice!r} is not one of: {options}")
    if confidence is not None and not 0 <= confidence <= 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    tag_list = list(tags)
    for field, text in (("annotator", annotator), ("notes", notes), ("tags", "".join(tag_list))):
        if "\x00" in text:
            raise ValueError(f"the {field} must not hold a NUL character (U+0000); remove it")
    previous = latest_label(item_db_id, annotator, session=session)
    adjudication = Adjudication(
        item_id=item_db_id,
        annotator=annotator,
        choice=choice,
        confidence=confidence,
        tags=tag_list,
        notes=notes,
        supersedes=previous.id if previous is not None else None,
    )
    session.add(adjudication)
    try:
        session.flush()
    except IntegrityError as exc:  # the chain index: another save took this place first
        raise LostRaceError(
            f"another label by {annotator!r} for item {item_db_id} was saved at the same time"
        ) from exc
    item_event(item_db_id, "label.created", label_data(adjudication), session=session)
    return adjudication


def label_data(label: Adjudication | Mapping[str, Any]) -> dict[str, Any]:
    """What a ``label.created`` event tells of a label."""
    fields = label if isinstance(label, Mapping) else label.model_dump()
    return {k: fields.get(k) for k in ("annotator", "choice", "confidence")}


def add_first_labels(labels: Iterable[Mapping[str, Any]], *, session: Session) -> None:
    """Store first labels, each an :class:`Adjudication`'s fields (an import, checked), in one
    statement that makes no object per row."""
    defaults: dict[str, Any] = {
        "created_at": utc_now(),
        "confidence": None,
        "tags": [],
        "notes": "",
    }
    rows = [defaults | {"supersedes": None, "source": None} | dict(label) for label in labels]
    if rows:
        session.execute(insert(Adjudication), rows)
    if rows and wants("label.created", session=session):
        for row in rows:
            item_event(row["item_id"], "label.created", label_data(row), session=session)


def latest_label(item_db_id: int, annotator: str, *, session: Session) -> Adjudication | None:
    """The annotator's current label of the item (their newest row), or None."""
    return session.exec(
        select(Adjudication)
        .where(Adjudication.item_id == item_db_id, Adjudication.annotator == annotator)
        .order_by(col(Adjudication.created_at).desc(), col(Adjudication.id).desc())
        .limit(1)
    ).first()


def adjudication_history(item_db_id: int, *, session: Session) -> list[Adjudication]:
    """Every label ever given to the item, by every annotator, oldest first."""
    return list(
        session.exec(
            select(Adjudication)
            .where(Adjudication.item_id == item_db_id)
            .order_by(col(Adjudication.created_at), col(Adjudication.id))
        ).all()
    )


def current_labels(dataset_id: int, *, session: Session) -> pd.DataFrame:
    """The newest label of every (item, annotator) of the dataset in item order (LABEL_COLUMNS)."""
    rows = session.exec(
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            ItemRow.item_key,
            Adjudication.item_id,
            Adjudication.annotator,
            Adjudication.choice,
            Adjudication.confidence,
            Adjudication.tags,
            Adjudication.notes,
            Adjudication.created_at,
            Adjudication.id,
        )
        .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
        .where(ItemRow.dataset_id == dataset_id)
        .order_by(
            ItemRow.position, Adjudication.annotator, Adjudication.created_at, Adjudication.id
        )
    ).all()
    labels = pd.DataFrame([tuple(row) for row in rows], columns=list(LABEL_COLUMNS))
    return labels.drop_duplicates(["item_db_id", "annotator"], keep="last", ignore_index=True)


def adjudicated_item_keys(dataset_id: int, annotator: str, *, session: Session) -> set[str]:
    """Keys of the dataset's items that ``annotator`` has labelled."""
    rows = session.exec(
        select(ItemRow.item_key)
        .join(Adjudication, col(Adjudication.item_id) == ItemRow.id)
        .where(ItemRow.dataset_id == dataset_id, Adjudication.annotator == annotator)
        .distinct()
    )
    return set(rows.all())


def labelled_item_counts(dataset_id: int, *, session: Session) -> dict[str, int]:
    """``{item key: number of annotators who labelled it}`` for the labelled items."""
    rows = session.exec(
        select(ItemRow.item_key, func.count(distinct(col(Adjudication.annotator))))
        .join(Adjudication, col(Adjudication.item_id) == ItemRow.id)
        .where(ItemRow.dataset_id == dataset_id)
        .group_by(ItemRow.item_key)
    )
    return dict(rows.all())


def adjudication_records(dataset_id: int, *, session: Session) -> list[dict[str, Any]]:
    """Every adjudication of the dataset, corrections included, oldest first, for export (its
    fields, ``item_id`` the item's key)."""
    rows = session.exec(
        select(Adjudication, ItemRow.item_key)
        .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
        .where(ItemRow.dataset_id == dataset_id)
        .order_by(col(Adjudication.created_at), col(Adjudication.id))
    ).all()
    return [
        {name: getattr(adj, name) for name in Adjudication.model_fields}
        | {"item_id": item_key, "created_at": adj.created_at.isoformat()}
        for adj, item_key in rows
    ]


def get_member(identity: str, *, session: Session) -> Member | None:
    """The member named ``identity``: spelled so, or stored as its identity key
    (:func:`pcf.identities.identity_key`), the exact spelling first; None for none. A spelling
    the identity rule refuses finds only a member stored with that very spelling (a local name
    such as "Émile", or a row from before the rule)."""
    try:
        spellings = {identity, identity_key(identity)}
    except IdentityError:
        spellings = {identity}
    found = session.exec(select(Member).where(col(Member.email).in_(spellings))).all()
    return min(found, key=lambda member: member.email != identity, default=None)


def bind_member(email: str, issuer: str, subject: str, *, session: Session) -> bool:
    """Bind the unbound member stored as ``email`` (that spelling) to the provider account
    ``issuer``/``subject`` in one statement (two first sign-ins at once bind one account);
    whether it did."""
    bound = session.execute(
        update(Member)
        .where(col(Member.email) == email, col(Member.issuer).is_(None))
        .values(issuer=issuer, subject=subject)
        .execution_options(synchronize_session="fetch")
    )
    session.flush()
    return rows_changed(bound) == 1


def local_member(*, session: Session) -> Member | None:
    """The local person of local mode, once they gave their name."""
    return session.exec(select(Member).where(col(Member.local))).first()


def list_members(*, session: Session) -> list[Member]:
    """Every member, by email."""
    return list(session.exec(select(Member).order_by(col(Member.email))).all())


def save_member(
    email: str, role: str, *, session: Session, added_by: str, local: bool = False
) -> Member:
    """Add a member, or give an existing one (:func:`get_member`) another role."""
    member = get_member(email, session=session)
    if member is None:
        member = Member(email=email, role=role, added_by=added_by, local=local)
    else:
        member.role = role
    return saved(member, session=session)


def delete_member(email: str, *, session: Session) -> None:
    """Remove the member stored as ``email`` (that spelling; their labels stay)."""
    session.exec(delete(Member).where(col(Member.email) == email))
    session.flush()


def add_audit_event(
    action: str,
    *,
    session: Session,
    actor: str,
    target: str = "",
    details: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """Record that ``actor`` did ``action`` to ``target`` now; audit rows are never changed."""
    event = AuditEvent(actor=actor, action=action, target=target, details=dict(details or {}))
    return saved(event, session=session)


def audit_events(*, session: Session, limit: int | None = None) -> list[AuditEvent]:
    """The audit log, newest first (all of it, or the newest ``limit`` events)."""
    query = select(AuditEvent).order_by(col(AuditEvent.at).desc(), col(AuditEvent.id).desc())
    return list(session.exec(query.limit(limit) if limit else query).all())


def get_plan(dataset_id: int, *, session: Session) -> LabellingPlan | None:
    """The dataset's labelling plan, or None when none was set (one label per item)."""
    return session.get(LabellingPlan, dataset_id)


def save_plan(
    dataset_id: int, *, session: Session, updated_by: str, **fields: Any
) -> LabellingPlan:
    """Set the dataset's labelling plan's ``fields`` (a new plan has defaults for the rest)."""
    plan = session.get(LabellingPlan, dataset_id) or LabellingPlan(
        dataset_id=dataset_id, updated_by=updated_by
    )
    plan.sqlmodel_update({**fields, "updated_by": updated_by, "updated_at": utc_now()})
    return saved(plan, session=session)


def labellers_by_item(
    dataset_id: int, *, session: Session, item_db_id: int | None = None
) -> dict[int, set[str]]:
    """``{item db id: annotators who labelled it}`` (of the one item ``item_db_id``, if given)."""
    query = (
        select(Adjudication.item_id, Adjudication.annotator)
        .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
        .where(ItemRow.dataset_id == dataset_id)
        .distinct()
    )
    if item_db_id is not None:
        query = query.where(Adjudication.item_id == item_db_id)
    return _people_by_item(session.exec(query))


def labellers_of_items(item_db_ids: Collection[int], *, session: Session) -> dict[int, set[str]]:
    """``{item db id: annotators who labelled it}`` of these items (the labelled ones)."""
    query = select(Adjudication.item_id, Adjudication.annotator).distinct()
    return _people_by_item(
        session.exec(query.where(col(Adjudication.item_id).in_(list(item_db_ids))))
    )


def holders_by_item(
    dataset_id: int, *, session: Session, now: datetime, item_db_id: int | None = None
) -> dict[int, set[str]]:
    """``{item db id: annotators holding it}`` at ``now`` (of the one item, if given)."""
    query = (
        select(ItemHold.item_id, ItemHold.annotator)
        .join(ItemRow, col(ItemRow.id) == ItemHold.item_id)
        .where(ItemRow.dataset_id == dataset_id, ItemHold.expires_at > now)
    )
    if item_db_id is not None:
        query = query.where(ItemHold.item_id == item_db_id)
    return _people_by_item(session.exec(query))


def _people_by_item(rows: Iterable[tuple[int, str]]) -> dict[int, set[str]]:
    found: dict[int, set[str]] = defaultdict(set)
    for item_id, annotator in rows:
        found[item_id].add(annotator)
    return dict(found)


def lock_item(item_db_id: int, *, session: Session) -> None:
    """Make the transaction the only one claiming or labelling the item until it commits.

    PostgreSQL locks the item's row (``FOR UPDATE``); SQLite takes its write lock now (``BEGIN
    IMMEDIATE``: Python's sqlite3 would open the transaction at the first write, after the reads).
    """
    if not _sqlite_write_lock(session):
        session.exec(select(ItemRow.id).where(ItemRow.id == item_db_id).with_for_update()).first()


def lock_plan(dataset_id: int, *, session: Session) -> None:
    """Make the transaction the only one changing the dataset's labelling plan until it commits
    (its dataset's row on PostgreSQL, the write lock on SQLite, as :func:`lock_item`)."""
    if not _sqlite_write_lock(session):
        session.exec(select(Dataset.id).where(Dataset.id == dataset_id).with_for_update()).first()


def _sqlite_write_lock(session: Session) -> bool:
    """On SQLite, take the write lock now and say True; elsewhere False."""
    connection = session.connection()
    if connection.dialect.name != "sqlite":
        return False
    driver = connection.connection.driver_connection
    assert driver is not None  # a connection checked out of the pool has its driver's
    if not driver.in_transaction:
        driver.execute("BEGIN IMMEDIATE")
    return True


def hold_item(item_db_id: int, annotator: str, *, session: Session, until: datetime) -> None:
    """Reserve the item for ``annotator`` until ``until`` (a new hold or a longer one)."""
    session.merge(ItemHold(item_id=item_db_id, annotator=annotator, expires_at=until))
    session.flush()


def release_item(item_db_id: int, annotator: str, *, session: Session) -> None:
    """End ``annotator``'s hold on the item, if any."""
    session.exec(
        delete(ItemHold).where(
            col(ItemHold.item_id) == item_db_id, col(ItemHold.annotator) == annotator
        )
    )
    session.flush()


def assign_items(
    item_db_ids: Iterable[int], annotator: str | None, *, session: Session, assigned_by: str
) -> None:
    """Give the items to ``annotator`` (replacing any assignee), or with None take them back."""
    ids = list(item_db_ids)
    session.exec(delete(Assignment).where(col(Assignment.item_id).in_(ids)))
    if annotator is not None:
        session.add_all(
            Assignment(item_id=i, annotator=annotator, assigned_by=assigned_by) for i in ids
        )
    session.flush()


def assignees_by_item(dataset_id: int, *, session: Session) -> dict[int, str]:
    """``{item db id: its assignee}``, only assignees who are members that may still label."""
    rows = session.exec(
        select(Assignment.item_id, Assignment.annotator)
        .join(ItemRow, col(ItemRow.id) == Assignment.item_id)
        .join(Member, func.lower(Member.email) == func.lower(Assignment.annotator))
        .where(ItemRow.dataset_id == dataset_id, Member.role != "viewer")
    )
    return dict(rows.all())


def add_resolution(
    item_db_id: int, *, session: Session, choice: str, reason: str, resolved_by: str
) -> Resolution:
    """Record a reviewer's gold for the item as a new row (the newest row is its resolution);
    queue ``item.resolved``, and ``gold.changed`` when the item's resolved gold is new."""
    before = session.exec(
        select(Resolution.choice)
        .where(Resolution.item_id == item_db_id)
        .order_by(col(Resolution.created_at).desc(), col(Resolution.id).desc())
    ).first()
    resolution = Resolution(
        item_id=item_db_id, choice=choice, reason=reason, resolved_by=resolved_by
    )
    saved(resolution, session=session)
    told = {"choice": choice, "resolved_by": resolved_by, "reason": reason}
    item_event(item_db_id, "item.resolved", told, session=session)
    if before != choice:
        changed = {"gold": choice, "previous": before, "source": "resolution"}
        item_event(item_db_id, "gold.changed", changed, session=session)
    return resolution


def add_comment(item_db_id: int, *, session: Session, author: str, text: str) -> Comment:
    """Add a message to the item's thread."""
    return saved(Comment(item_id=item_db_id, author=author, text=text), session=session)


def item_comments(item_db_id: int, *, session: Session) -> list[Comment]:
    """The item's thread, oldest first."""
    return list(
        session.exec(
            select(Comment)
            .where(Comment.item_id == item_db_id)
            .order_by(col(Comment.created_at), col(Comment.id))
        ).all()
    )


def resolutions(dataset_id: int, *, session: Session) -> pd.DataFrame:
    """Every resolution of the dataset's items, oldest first: ``item_key``, ``item_db_id``,
    ``choice``, ``reason``, ``resolved_by``, ``created_at``, ``resolution_id``."""
    rows = session.execute(
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            ItemRow.item_key,
            col(Resolution.item_id).label("item_db_id"),
            Resolution.choice,
            Resolution.reason,
            Resolution.resolved_by,
            Resolution.created_at,
            col(Resolution.id).label("resolution_id"),
        )
        .join(ItemRow, col(ItemRow.id) == Resolution.item_id)
        .where(ItemRow.dataset_id == dataset_id)
        .order_by(col(Resolution.created_at), col(Resolution.id))
    )
    return pd.DataFrame(rows.all(), columns=list(rows.keys()))
