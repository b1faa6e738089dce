"""Adaptive runs: each item's planned calls are made in waves of one call, canonical first and
then in schedule order (so slot balance holds as far as the calls go), and a stopping policy
(:mod:`pcf.stopping`) decides after each wave whether the item is settled.

Every call still goes through the engine (cache, retries, one commit per answer), and the
policy only ever reads stored calls, so a resumed run makes the same decisions as one that was
never interrupted. Why each item stopped is recorded with the run.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from sqlmodel import Session

from pcf.items import Item
from pcf.runs.spec import RunSpec
from pcf.stopping import ItemCalls, Stop, StoppingPolicy, current_winner, wave_order
from pcf.store.models import Call, Run
from pcf.store.queries import item_calls, stored_judgment


def policy_of(spec: RunSpec) -> StoppingPolicy:
    """The stopping policy an adaptive spec names."""
    return StoppingPolicy(spec.adaptive, risk=spec.risk)


def executions_for(spec: RunSpec) -> RunSpec:
    """The spec whose plan holds every call an item may get: with ``max_calls`` above the
    planned calls, further executions of the same schedule."""
    if spec.max_calls is None or spec.max_calls <= spec.k * spec.executions:
        return spec
    return replace(spec, executions=math.ceil(spec.max_calls / spec.k))


def item_budget(spec: RunSpec) -> int:
    """The most calls an item gets: the planned calls, or ``max_calls`` when given."""
    return spec.max_calls if spec.max_calls is not None else spec.k * spec.executions


def _judgments(item: Item, calls: Sequence[Call]) -> list:
    return [
        stored_judgment(
            item.item_id,
            c.execution,
            c.call_index,
            c.ok,
            c.error,
            c.order,
            c.judgment,
            c.repaired,
        )
        for c in calls
    ]


def item_step(
    calls: Sequence, stored: Sequence[Call], spec: RunSpec, policy: StoppingPolicy
) -> tuple[object | None, Stop | None]:
    """An item's next call, or where it stopped and why (exactly one of the two is None).

    Args:
        calls: the item's calls in wave order, at most its budget (:func:`item_budget`).
        stored: the item's stored calls.
        spec: the adaptive spec.
        policy: its stopping policy.
    """
    item = calls[0].item
    made = {(c.execution, c.call_index) for c in stored}
    left = [c for c in calls if (c.execution, c.call_index) not in made]
    judgments = sorted(_judgments(item, stored), key=wave_order)
    remaining = tuple((c.execution, tuple(c.order)) for c in left)
    state = ItemCalls(item.item_id, item.candidate_ids, tuple(judgments), remaining)
    if left and not (judgments and policy.settled(state)):
        return left[0], None
    reason = "planned_calls_made" if not left else policy.name
    if not left and len(calls) > spec.k * spec.executions:
        reason = "max_calls"
    return None, Stop(len(stored), reason, current_winner(state))


def _by_item(planned: Sequence, spec: RunSpec) -> list[list]:
    budget = item_budget(spec)
    by_item: dict[int, list] = defaultdict(list)
    for call in planned:
        by_item[call.item_db_id].append(call)
    return [sorted(c, key=lambda c: (c.execution, c.call_index))[:budget] for c in by_item.values()]


def next_wave(
    planned: Sequence, run: Run, spec: RunSpec, *, session: Session
) -> tuple[list, dict[str, Stop]]:
    """Every unsettled item's next call, and where the settled items stopped (batch mode: each
    wave is one batch)."""
    policy = policy_of(spec)
    wave, stops = [], {}
    for calls in _by_item(planned, spec):
        stored = item_calls(run.id, calls[0].item_db_id, session=session)
        call, stop = item_step(calls, stored, spec, policy)
        if stop is None:
            wave.append(call)
        else:
            stops[calls[0].item.item_id] = stop
    return wave, stops


async def answer_in_waves(
    executor, planned: Sequence, run: Run, spec: RunSpec, *, session: Session
) -> dict[str, Stop]:
    """Make each item's calls one wave at a time until its policy settles it.

    Args:
        executor: the engine's executor (it answers a list of planned calls).
        planned: every call an item may get, from the plan of :func:`executions_for`.
        run: the run.
        spec: the adaptive spec.
        session: the run's session.

    Returns:
        Per item key, where it stopped and why.
    """
    policy = policy_of(spec)
    stops: dict[str, Stop] = {}

    async def one(calls: list) -> None:
        while True:
            stored = item_calls(run.id, calls[0].item_db_id, session=session)
            call, stop = item_step(calls, stored, spec, policy)
            if stop is not None:
                stops[calls[0].item.item_id] = stop
                return
            if executor.report.capped:  # the cost cap is reached: the item waits unsettled
                return
            await executor.answer([call])

    await asyncio.gather(*(one(calls) for calls in _by_item(planned, spec)))
    return stops
