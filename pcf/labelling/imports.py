"""Labels from elsewhere imported into a dataset, all or nothing (``pcf labels import``; the
columns, external annotators and the plan's rules: docs/reviewing.md, "Labels from elsewhere").
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, BeforeValidator, Field
from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.files import Text, open_checked, read_rows
from pcf.items import RESERVED_CANDIDATE_IDS
from pcf.labelling.plan import labelling_plan
from pcf.store import (
    Dataset,
    add_audit_event,
    add_first_labels,
    items_named,
    labellers_by_item,
    lock_item,
)

COLUMNS = ("item_id", "annotator", "answer")
"""The columns every file has; ``confidence``, ``note`` and ``time`` may be added."""


def _blank_is_none(value: Any) -> Any:
    """An empty cell (CSV), a missing value (Parquet's NaN or NaT) or null, as None."""
    if isinstance(value, str) and not value.strip():
        return None
    if isinstance(value, float | datetime) and value != value:  # NaN, NaT  # noqa: PLR0124
        return None
    return value


MaybeBlank = BeforeValidator(_blank_is_none)


class _LabelRow(BaseModel):
    """A row of a labels file."""

    item_id: Text
    annotator: Text
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
    the labels given before, no item gets more than its plan's labels, nor one person's twice.

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
    rows = [
        (line, row)
        for line, raw in read_rows(path, check, COLUMNS)
        if (row := check.validate(_LabelRow, raw, line)) is not None
    ]
    items = {
        item.item_id: item
        for item in items_named(
            dataset_id, {row.item_id for _, row in rows}, session=session, texts=False
        )
    }
    for db_id in sorted(found.metadata["db_id"] for found in items.values()):  # one lock order
        lock_item(db_id, session=session)
    labelled = labellers_by_item(dataset_id, session=session)
    wanted = labelling_plan(dataset_id, session=session).labels_per_item
    for line, row in rows:
        item = items.get(row.item_id)
        if item is None:
            check.add(line, "item_id", f"no item {row.item_id!r} in dataset {dataset.name!r}")
            continue
        choices = (*item.candidate_ids, *RESERVED_CANDIDATE_IDS)
        if row.answer not in choices:
            check.add(line, "answer", f"{row.answer!r} is not one of: {', '.join(choices)}")
        people = labelled.setdefault(item.metadata["db_id"], set())
        if row.annotator in people:
            check.add(line, "annotator", f"{row.annotator!r} labelled {row.item_id!r} already")
        elif len(people) >= wanted:
            message = f"item {row.item_id!r} has the {wanted} label(s) its plan asks for"
            check.add(line, "item_id", message)
        people.add(row.annotator)
    if not rows and not check.problems:
        check.add(None, None, "holds no label")
    check.problems.sort(key=lambda problem: problem.line or 0)
    check.raise_if_any()
    labels = [
        {
            "item_id": items[row.item_id].metadata["db_id"],
            "annotator": row.annotator,
            "choice": row.answer,
            "confidence": row.confidence,
            "notes": row.note,
            "source": source,
            **({"created_at": row.time} if row.time else {}),
        }
        for _, row in rows
    ]
    add_first_labels(labels, session=session)
    details = {"labels": len(rows), "source": source, "file": str(path)}
    add_audit_event(
        "labels_imported",
        session=session,
        actor=actor.identity,
        target=dataset.name,
        details=details,
    )
    return len(rows)
