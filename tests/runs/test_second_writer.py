"""Two writers answering the same run at once (what the run lease prevents, should it ever
happen): neither stops, each call is stored once, and every other paid answer is kept as a
``duplicate`` replaced call, so none is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sqlmodel import Session, select

from pcf.judges.simulated import SimulatedJudge
from pcf.runs.live import execute
from pcf.runs.spec import RunSpec
from pcf.store import Call, ReplacedCall, import_items, load_items
from tests.factories import make_item, stored_run

SPEC = RunSpec("ds", "r", k=3, concurrency=4)


def test_two_writers_of_one_run_store_each_call_once_and_keep_every_answer(
    session: Session, new_session: Callable[[], Session]
):
    dataset = import_items(
        [make_item(f"q{i}") for i in range(5)], session=session, name="ds", fmt="jsonl"
    )
    run = stored_run(
        session, dataset.id, name="r", model="sim-primacy", k=SPEC.k, schedule=SPEC.schedule
    )
    items = load_items(dataset.id, session=session)
    planned = len(items) * SPEC.k

    async def both() -> list:
        with new_session() as first, new_session() as second:
            return await asyncio.gather(
                *(
                    execute(
                        session.get(type(run), run.id),
                        items,
                        SimulatedJudge("sim-primacy"),
                        SPEC,
                        session=session,
                        prices={},
                    )
                    for session in (first, second)
                )
            )

    reports = asyncio.run(both())

    calls = session.exec(select(Call)).all()
    kept = session.exec(select(ReplacedCall)).all()
    slots = {(c.item_id, c.execution, c.call_index) for c in calls}
    assert len(calls) == len(slots) == planned
    answered = sum(r.done for r in reports)
    assert answered == len(calls) + len(kept)  # every answer of either writer is stored
    assert sum(r.duplicates for r in reports) == len(kept) > 0
    assert {k.reason for k in kept} == {"duplicate"}
    by_id = {c.id: c for c in calls}
    for duplicate in kept:
        call = by_id[duplicate.call_id]
        assert (duplicate.values["item_id"], duplicate.values["call_index"]) == (
            call.item_id,
            call.call_index,
        )
        assert duplicate.values["response_text"]
