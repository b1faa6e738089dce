"""Results kept per revision of a run's calls (and labels). Functions flush, never commit."""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

from sqlalchemy import (
    delete,
    func,
    insert,
)
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from pcf.store.models import (
    Adjudication,
    Call,
    ItemRow,
    LabellingPlan,
    ReplacedCall,
    Resolution,
    Run,
    RunResult,
    utc_now,
)


def run_version(run: Run, *, session: Session) -> tuple[str, int, int, int]:
    """A key that changes whenever the run's calls do: status, call count, newest call id and
    newest replaced answer (a retried call keeps its id and count)."""
    count, newest = session.exec(
        select(func.count(col(Call.id)), func.coalesce(func.max(col(Call.id)), 0)).where(
            Call.run_id == run.id
        )
    ).one()
    replaced = session.exec(
        select(func.coalesce(func.max(col(ReplacedCall.id)), 0))
        .join(Call, col(Call.id) == ReplacedCall.call_id)
        .where(Call.run_id == run.id)
    ).one()
    return run.status, int(count), int(newest), int(replaced)


def result_revision(run: Run, *, session: Session, labels: bool = False) -> str:
    """A result's revision: :func:`run_version` (and with ``labels`` :func:`label_revision`)."""
    parts: list[Any] = [list(run_version(run, session=session))]
    if labels:
        parts.append(list(label_revision(run.dataset_id, session=session)))
    return json.dumps(parts, default=str)


def run_result(run_id: int, name: str, revision: str, *, session: Session) -> bytes | None:
    """The stored result ``name`` of a run when it was computed at ``revision``, else None."""
    return session.exec(
        select(RunResult.data).where(
            RunResult.run_id == run_id, RunResult.name == name, RunResult.revision == revision
        )
    ).first()


def save_run_result(
    run_id: int, name: str, revision: str, data: bytes, *, session: Session
) -> None:
    """Keep ``data`` as the run's result ``name`` at ``revision``, in place of the one before;
    when another process stores it at the same time, theirs stays."""
    # on a clash the other writer's result, computed from the same calls, is kept
    with suppress(IntegrityError), session.begin_nested():
        session.execute(
            delete(RunResult).where(col(RunResult.run_id) == run_id, col(RunResult.name) == name)
        )
        session.execute(
            insert(RunResult).values(
                run_id=run_id, name=name, revision=revision, computed_at=utc_now(), data=data
            )
        )


def label_revision(dataset_id: int, *, session: Session) -> tuple[Any, ...]:
    """A value that changes whenever the dataset's labels, resolutions or plan do."""
    newest_label, newest_resolution = (
        session.exec(
            select(func.max(row.id))
            .join(ItemRow, col(ItemRow.id) == row.item_id)
            .where(ItemRow.dataset_id == dataset_id)
        ).one()
        for row in (Adjudication, Resolution)
    )
    plan = session.get(LabellingPlan, dataset_id)
    return newest_label, newest_resolution, plan.updated_at if plan is not None else None
