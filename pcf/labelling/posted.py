"""Labels posted in bulk by a client (the HTTP API), each under the client's own label id so
that posting it again saves nothing twice, the labels and gold a client reads back, and the
next item of a client's queue (the Label page's queue and reservations)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import pandas as pd
from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.errors import DataError, Problem
from pcf.items import RESERVED_CANDIDATE_IDS
from pcf.labelling.adjudications import (
    adjudication_queue,
    display_order,
    item_index,
    with_priority,
)
from pcf.labelling.exports import gold_records
from pcf.labelling.human_gold import needs_more_labels
from pcf.labelling.labels import ItemFullError, save_label
from pcf.labelling.plan import labelling_plan
from pcf.labelling.queue import RESERVATION, claim_next, labels_wanted
from pcf.store import (
    Dataset,
    add_posted_label,
    adjudication_records,
    current_labels,
    get_dataset,
    items_named,
    latest_label,
    load_item,
    lock_item,
    posted_labels,
    utc_now,
)


def _dataset(name: str, *, session: Session) -> Dataset:
    dataset = get_dataset(name, session=session)
    if dataset is None:
        raise ValueError(f"no dataset {name!r}")
    return dataset


def post_labels(
    name: str, labels: list[dict[str, Any]], *, session: Session, actor: Actor
) -> list[dict[str, Any]]:
    """Save ``labels`` (``label_id``, ``item_id``, ``answer``, optional ``confidence`` and
    ``note``) of dataset ``name`` as ``actor``'s, all or nothing; a ``label_id`` the actor
    posted before is the label it saved then. Each label's ``label_id``, the ``adjudication_id``
    of its stored label, and whether this call ``saved`` it.

    Raises:
        DataError: every problem, at ``labels[i]`` and its field (file ``labels``, ``line`` i).
        ValueError: no such dataset.
    """
    actor = authorize(actor, Permission.LABEL, session=session)
    dataset = _dataset(name, session=session)
    before = posted_labels(actor.identity, [label["label_id"] for label in labels], session=session)
    keys = {label["item_id"] for label in labels}
    items = {i.item_id: i for i in items_named(dataset.id, keys, session=session, texts=False)}
    wanted = labelling_plan(dataset.id, session=session).labels_per_item
    problems, out, seen = [], [], set()
    for line, label in enumerate(labels):
        label_id, item = label["label_id"], items.get(label["item_id"])

        def problem(field: str, message: str, line: int = line) -> None:
            problems.append(Problem("labels", line, field, message))

        if label_id in seen:
            problem("label_id", f"{label_id!r} comes twice in this request")
        seen.add(label_id)
        if label_id in before:
            out.append({"label_id": label_id, "adjudication_id": before[label_id], "saved": False})
            continue
        if item is None:
            problem("item_id", f"no item {label['item_id']!r} in dataset {name!r}")
            continue
        choices = (*item.candidate_ids, *RESERVED_CANDIDATE_IDS)
        if label["answer"] not in choices:
            problem("answer", f"{label['answer']!r} is not one of: {', '.join(choices)}")
            continue
        if problems:
            continue  # nothing will be saved: the rest is only checked
        db_id = item.metadata["db_id"]
        lock_item(db_id, session=session)  # then read: a racing post of this label is seen
        if again := posted_labels(actor.identity, [label_id], session=session):
            out.append({"label_id": label_id, "adjudication_id": again[label_id], "saved": False})
            continue
        current = latest_label(db_id, actor.identity, session=session)
        try:
            saved = save_label(
                db_id,
                session=session,
                actor=actor,
                choice=label["answer"],
                seen=None if current is None else current.id,
                confidence=label.get("confidence"),
                notes=label.get("note") or "",
                wanted=wanted,
            )
        except ItemFullError as exc:
            problem("item_id", str(exc).split(";")[0])
            continue
        add_posted_label(actor.identity, label_id, saved.id, session=session)
        out.append({"label_id": label_id, "adjudication_id": saved.id, "saved": True})
    if problems:
        raise DataError(problems)
    return out


def labels_since(
    name: str, *, session: Session, actor: Actor, since: datetime | None = None
) -> list[dict[str, Any]]:
    """Every label of dataset ``name`` (corrections too) saved after ``since``, oldest first,
    as ``pcf export --what adjudications`` writes them."""
    authorize(actor, Permission.SEE_RESULTS, session=session)
    records = adjudication_records(_dataset(name, session=session).id, session=session)
    if since is None:
        return records
    return [r for r in records if datetime.fromisoformat(r["created_at"]) > since]


def gold(name: str, *, session: Session, actor: Actor) -> list[dict[str, Any]]:
    """The human gold of dataset ``name``, as ``pcf gold export`` writes it."""
    authorize(actor, Permission.SEE_RESULTS, session=session)
    return gold_records(_dataset(name, session=session).id, session=session)


def next_item(
    name: str,
    *,
    session: Session,
    actor: Actor,
    table: pd.DataFrame | None = None,
    skip: Collection[str] = (),
) -> tuple[dict[str, Any] | None, int]:
    """Hold ``actor``'s next item of dataset ``name`` for them, as the Label page does: most
    doubtful first by a run's decision ``table`` (None: in file order), the plan's calibration
    share and escalated items first, ``skip``-ped items last. The item (its candidates in the
    order shown to ``actor``, no gold; ``held_until`` when the hold ends) or None when the
    queue is empty, and how many items the queue holds.

    Raises:
        ValueError: no such dataset, or an item of ``skip`` that is not in it.
    """
    dataset = _dataset(name, session=session)
    items = with_priority(item_index(dataset.id, session=session), table)
    db_ids = dict(zip(items["item_id"], items["db_id"], strict=True))
    if unknown := sorted(set(skip) - db_ids.keys()):
        raise ValueError(f"skip: no item {', '.join(unknown[:5])} in dataset {name!r}")
    plan = labelling_plan(dataset.id, session=session)
    doubtful = set(db_ids)
    if plan.adaptive:
        doubtful = needs_more_labels(table, current_labels(dataset.id, session=session))
    order = [(key, int(db_ids[key])) for key in adjudication_queue(items, (), list(skip))]
    now = utc_now()
    claim = claim_next(
        dataset.id,
        order,
        session=session,
        actor=actor,
        wanted=labels_wanted(plan, list(db_ids), doubtful),
        skip=skip,
        now=now,
    )
    if claim is None:
        return None, 0
    item = load_item(claim.item_db_id, session=session)
    assert item is not None  # items are never deleted
    texts = dict(zip(item.candidate_ids, (c.text for c in item.candidates), strict=True))
    shown = [{"id": c, "text": texts[c]} for c in display_order(item, actor.identity)]
    held = {"item_id": item.item_id, "prompt": item.prompt, "candidates": shown}
    return held | {"held_until": now + RESERVATION}, len(claim.queue)
