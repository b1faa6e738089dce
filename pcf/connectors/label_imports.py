"""Labels from elsewhere imported into a dataset, all or nothing (``pcf labels import``; the
columns, external annotators and the plan's rules: docs/reviewing.md, "Labels from elsewhere").
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, Field
from pydantic_core import PydanticCustomError
from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.files import FieldChecker, Text, open_checked, read_rows
from pcf.identities import IdentityError, folded, identity_key
from pcf.items import RESERVED_CANDIDATE_IDS
from pcf.labelling.plan import labelling_plan
from pcf.store import (
    Dataset,
    add_audit_event,
    add_first_labels,
    item_ids_named,
    items_named,
    labellers_of_items,
    lock_item,
)

COLUMNS = ("item_id", "annotator", "answer")
"""The columns every file has; ``confidence``, ``note`` and ``time`` may be added."""
BATCH = 500
"""Rows checked and stored at once."""


def _blank_is_none(value: Any) -> Any:
    """An empty cell (CSV), a missing value (Parquet's NaN or NaT) or null, as None."""
    if isinstance(value, str) and not value.strip():
        return None
    if isinstance(value, float | datetime) and value != value:  # NaN, NaT  # noqa: PLR0124
        return None
    return value


MaybeBlank = BeforeValidator(_blank_is_none)


def _one_spelling(annotator: str) -> str:
    """The annotator's identity key: the same person in any case or padding."""
    try:
        return identity_key(annotator)
    except IdentityError as exc:
        raise PydanticCustomError("pcf", str(exc)) from None


class _LabelRow(BaseModel):
    """A row of a labels file."""

    item_id: Text
    annotator: Annotated[Text, AfterValidator(_one_spelling)]
    answer: Text
    confidence: Annotated[Annotated[float, Field(ge=0, le=1)] | None, MaybeBlank] = Field(
        None, description="must be a number from 0 to 1, got {got}"
    )
    note: Annotated[str, BeforeValidator(lambda v: _blank_is_none(v) or "")] = ""
    time: Annotated[AwareDatetime | None, MaybeBlank] = Field(
        None, description="must be a date and time with its time zone (2026-12-04T10:00:00Z)"
    )


def import_labels(
    path: str | Path, dataset_id: int, *, session: Session, actor: Actor, source: str
) -> int:
    """Import the labels of the file at ``path`` into the dataset, all or nothing; how many. With
    the labels given before, no item gets more than its plan's labels, nor one person's twice
    (an annotator is their identity key: :func:`pcf.identities.identity_key`).

    The file is read twice, a row at a time: once for the items it names, locked in one order,
    then to check and store its labels :data:`BATCH` rows at a time, so memory holds a batch,
    not the file. A file with a problem stores nothing: the labels flushed before it was found
    go with the caller's transaction, which rolls back on the error (as ``session_scope`` does).

    Raises:
        ValueError: no such dataset, or an empty ``source``.
        DataError: every problem of the file, each with its line (a Parquet row's number)
            and field; nothing was saved.
    """
    actor = authorize(actor, Permission.IMPORT, session=session)
    dataset = session.get(Dataset, dataset_id)
    if dataset is None:
        raise ValueError(f"no dataset with id {dataset_id}")
    if not source.strip() or "\x00" in source:
        raise ValueError("name the labels' source: it is empty or holds a NUL character")
    path, check = open_checked(path)
    named = {
        key
        for _, raw in read_rows(path, FieldChecker(path), COLUMNS)  # its problems: the next pass
        if isinstance(key := raw.get("item_id"), str)
    }
    for db_id in item_ids_named(dataset_id, named, session=session):  # one lock order
        lock_item(db_id, session=session)
    del named
    wanted = labelling_plan(dataset_id, session=session).labels_per_item
    count = 0
    batch: list[tuple[int, _LabelRow]] = []
    for line, raw in read_rows(path, check, COLUMNS):
        row = check.validate(_LabelRow, raw, line)
        if row is not None:
            batch.append((line, row))
        if len(batch) == BATCH:
            count += _store_batch(batch, dataset, wanted, check, session=session, source=source)
            batch.clear()
    count += _store_batch(batch, dataset, wanted, check, session=session, source=source)
    if not count and not check.problems:
        check.add(None, None, "holds no label")
    check.problems.sort(key=lambda problem: problem.line or 0)
    check.raise_if_any()
    details = {"labels": count, "source": source, "file": str(path)}
    add_audit_event(
        "labels_imported",
        session=session,
        actor=actor.identity,
        target=dataset.name,
        details=details,
    )
    return count


def _store_batch(
    batch: list[tuple[int, _LabelRow]],
    dataset: Dataset,
    wanted: int,
    check: FieldChecker,
    *,
    session: Session,
    source: str,
) -> int:
    """Check a batch of rows against the plan and the labels stored (earlier batches' too) and
    store the sound ones, each problem in ``check``; how many rows were stored."""
    if not batch:
        return 0
    items = {
        item.item_id: item
        for item in items_named(
            dataset.id, {row.item_id for _, row in batch}, session=session, texts=False
        )
    }
    stored = labellers_of_items(
        [item.metadata["db_id"] for item in items.values()], session=session
    )
    labelled = {db_id: {folded(person) for person in people} for db_id, people in stored.items()}
    labels = []
    for line, row in batch:
        item = items.get(row.item_id)
        if item is None:
            check.add(line, "item_id", f"no item {row.item_id!r} in dataset {dataset.name!r}")
            continue
        choices = (*item.candidate_ids, *RESERVED_CANDIDATE_IDS)
        people = labelled.setdefault(item.metadata["db_id"], set())
        if row.answer not in choices:
            check.add(line, "answer", f"{row.answer!r} is not one of: {', '.join(choices)}")
        elif row.annotator in people:
            check.add(line, "annotator", f"{row.annotator!r} labelled {row.item_id!r} already")
        elif len(people) >= wanted:
            message = f"item {row.item_id!r} has the {wanted} label(s) its plan asks for"
            check.add(line, "item_id", message)
        else:
            people.add(row.annotator)
            labels.append(
                {
                    "item_id": item.metadata["db_id"],
                    "annotator": row.annotator,
                    "choice": row.answer,
                    "confidence": row.confidence,
                    "notes": row.note,
                    "source": source,
                    **({"created_at": row.time} if row.time else {}),
                }
            )
    add_first_labels(labels, session=session)
    return len(labels)
