"""A run's provider batches seen and stopped: their status as the provider reports it, the
overview the Runs page and ``pcf batch submit`` show (as stored), and cancelling them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.judges.batch_api import BatchClient, BatchLostError
from pcf.runs.batch import LOST_STATUS, client_for, existing_run, spec_of
from pcf.store import Run, run_batches


def batch_status(name: str, *, session: Session) -> list[dict[str, Any]]:
    """The run's batches with their progress as the provider reports it (collected ones as
    stored); a batch the provider answers 404 for has provider status ``not_found``."""
    run = existing_run(name, session=session)
    records = run_batches(run.id, session=session)
    rows = []

    async def read(client: BatchClient) -> None:
        try:
            for record in records:
                row = {
                    "batch_id": record.batch_id,
                    "state": record.state,
                    "requests": len(record.custom_ids),
                }
                if record.state == "submitted" and record.batch_id:
                    try:
                        status = await client.status(record.batch_id)
                    except BatchLostError as lost:
                        row |= {"provider_status": LOST_STATUS, "error": str(lost)}
                    else:
                        row |= {
                            "provider_status": status.status,
                            "finished": status.finished,
                            "failed": status.failed,
                            "error": status.error,
                        }
                rows.append(row)
        finally:
            await client.judge.aclose()

    asyncio.run(read(client_for(spec_of(run, session=session))))
    return rows


def cancel_runs(names: Sequence[str], *, session: Session, actor: Actor) -> dict[str, Any]:
    """Ask the provider to cancel the runs' batches not ended yet; the ids asked, and by run
    the ids the provider answers 404 for."""
    actor = authorize(actor, Permission.RUN, session=session)
    runs = [existing_run(name, session=session) for name in names]
    cancelled: list[str] = []
    lost: dict[str, list[str]] = {}

    async def cancel(run: Run) -> None:
        client = client_for(spec_of(run, session=session))
        try:
            for record in run_batches(run.id, session=session):
                if record.state != "submitted" or not record.batch_id:
                    continue
                try:
                    if not (await client.status(record.batch_id)).ended:
                        await client.cancel(record.batch_id)
                        cancelled.append(record.batch_id)
                except BatchLostError:
                    lost.setdefault(run.name, []).append(record.batch_id)
        finally:
            await client.judge.aclose()

    for run in runs:
        asyncio.run(cancel(run))
    return {"cancelled": cancelled, "lost": lost}


def batch_overview(runs: Sequence[Run], *, session: Session) -> list[dict[str, Any]]:
    """The runs that sent batches, as stored (no provider call), with the ids of batches the
    provider answered 404 for when last asked (``lost``)."""
    out = []
    for run in runs:
        records = run_batches(run.id, session=session)
        if records:
            collected = sum(r.state == "collected" for r in records)
            lost = [
                r.batch_id
                for r in records
                if r.state == "submitted" and r.provider_status == LOST_STATUS
            ]
            out.append(
                {
                    "run": run.name,
                    "status": run.status,
                    "batches": len(records),
                    "collected": collected,
                    "requests": sum(len(r.custom_ids) for r in records),
                    "to_collect": collected < len(records),
                    "lost": lost,
                }
            )
    return out
