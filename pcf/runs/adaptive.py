"""Adaptive runs (docs/costs.md): each item's planned calls are made in waves of one call until
a stopping policy (:mod:`pcf.stopping`) settles it.

The policy reads only stored calls, so a resumed run decides as an uninterrupted one would; each
stop is recorded with its policy version and kept on a rerun unless ``recheck``."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from pcf.items import Item
from pcf.orderings import schedule_length
from pcf.run_settings import Stopping, StopRecord
from pcf.runs.call_plan import PlannedCall, Slot
from pcf.runs.spec import RunSpec
from pcf.stopping import (
    STOPPING_VERSION,
    Calibration,
    ItemCalls,
    Stop,
    StoppingPolicy,
    calibrate,
    calibration_sample,
    current_winner,
    in_waves,
)
from pcf.store import Call, Run, call_judgments, item_calls, set_run_settings

if TYPE_CHECKING:
    from pcf.runs.live import CallExecutor


def policy_of(spec: RunSpec) -> StoppingPolicy:
    """The stopping policy an adaptive spec names, on the weights it stops on."""
    return StoppingPolicy(spec.adaptive, risk=spec.risk, weights=spec.stop_on)


def _executions_of(spec: RunSpec, per_execution: int) -> int:
    """Executions an item with ``per_execution`` scheduled calls may use (``max_calls`` may
    need more than the planned ones)."""
    return max(spec.executions, math.ceil((spec.max_calls or 0) / per_execution))


def executions_for(spec: RunSpec, items: Iterable[Item]) -> RunSpec:
    """The spec whose plan holds every call an item may get (see :func:`_executions_of`)."""
    lengths = [schedule_length(spec.schedule, len(item.candidates), spec.k) for item in items]
    needed = max((_executions_of(spec, length) for length in lengths), default=spec.executions)
    return replace(spec, executions=needed) if needed > spec.executions else spec


@dataclass(frozen=True)
class ItemPlan:
    """The calls an adaptive run may make for one item, in wave order, and how many it planned."""

    calls: list[PlannedCall]
    planned: int

    def reason_when_done(self) -> str:
        """Why the item stopped once every call of its budget was made."""
        return "planned_calls_made" if len(self.calls) == self.planned else "max_calls"


def item_plans(planned: Sequence[PlannedCall], spec: RunSpec) -> list[ItemPlan]:
    """Each item's :class:`ItemPlan`, from the plan of :func:`executions_for`."""
    plans = []
    for _, group in itertools.groupby(planned, key=lambda call: call.item_db_id):
        calls = list(group)
        per_execution = sum(call.execution == 0 for call in calls)
        executions = _executions_of(spec, per_execution)
        usable = [call for call in calls if call.execution < executions]
        plans.append(ItemPlan(in_waves(usable)[: spec.max_calls], per_execution * spec.executions))
    return plans


def item_state(item_plan: ItemPlan, stored: Sequence[Call]) -> tuple[ItemCalls, list]:
    """What the policy sees of an item, and the calls of its budget still to come."""
    item = item_plan.calls[0].item
    made = {(c.execution, c.call_index) for c in stored}
    left = [c for c in item_plan.calls if (c.execution, c.call_index) not in made]
    remaining = [(c.execution, tuple(c.order)) for c in left]
    judgments = call_judgments(item.item_id, stored)
    return ItemCalls.of(item.item_id, item.candidate_ids, judgments, remaining), left


def item_step(
    item_plan: ItemPlan, stored: Sequence[Call], policy: StoppingPolicy, *, full: bool = False
) -> tuple[list[PlannedCall], Stop | None]:
    """An item's next call (a ``full`` item's: all of them), or where it stopped and why."""
    state, left = item_state(item_plan, stored)
    if left and (full or not (state.judgments and policy.settled(state))):
        return (left if full else left[:1]), None
    reason = "calibration" if full else item_plan.reason_when_done() if not left else policy.name
    return [], Stop(len(stored), reason, current_winner(state, policy.weights))


def calibration_keys(spec: RunSpec, keys: Sequence[str]) -> set[str]:
    """The items a ``confident`` run judges in full first; none for ``certain``."""
    if spec.adaptive != "confident":
        return set()
    return calibration_sample(keys, spec.risk, spec.seed)


def calibration_items(run: Run) -> set[str]:
    """The items a finished or interrupted ``confident`` run judged in full to calibrate its
    threshold on (a random sample of its own draw), from its stored stops: the items a guarantee
    that needs fully judged items drawn at random may use."""
    return {key for key, stop in run.settings.stops.items() if stop.reason == "calibration"}


def calibration_calls(
    planned: Sequence[PlannedCall], run: Run, spec: RunSpec, keys: set[str], *, session: Session
) -> list[tuple[str, tuple[str, ...], list]]:
    """The stored calls of the items of ``keys`` among ``planned``, to calibrate on."""
    out = []
    for item_plan in item_plans(planned, spec):
        item = item_plan.calls[0].item
        if item.item_id in keys:
            stored = item_calls(run.id, item_plan.calls[0].item_db_id, session=session)
            out.append((item.item_id, item.candidate_ids, call_judgments(item.item_id, stored)))
    return out


def record_stops(
    run: Run,
    spec: RunSpec,
    kept: Mapping[str, StopRecord],
    stops: Mapping[str, Stop],
    *,
    session: Session,
    calibration: Calibration | None = None,
) -> None:
    """Record where each item stopped, with its policy version, and the policy (and
    calibration) the run was finished with."""
    new = {
        key: StopRecord(calls=s.calls, reason=s.reason, winner=s.winner, version=STOPPING_VERSION)
        for key, s in stops.items()
    }
    recorded = {**kept, **new}
    finished_with = Stopping(
        policy=spec.adaptive,
        risk=spec.risk if spec.adaptive == "confident" else None,
        stop_on=list(spec.stop_on.as_tuple()),
        max_calls=spec.max_calls,
        versions=sorted({stop.version for stop in recorded.values()}),
        calibration=None if calibration is None else calibration.as_dict(),
    )
    set_run_settings(run, run.settings.with_stops(recorded, finished_with), session=session)


def next_wave(
    planned: Sequence[PlannedCall],
    stored: Mapping[Slot, Call],
    spec: RunSpec,
    *,
    kept: Mapping[str, StopRecord],
    policy: StoppingPolicy | None,
    calibration: set[str],
) -> tuple[list[PlannedCall], dict[str, Stop]]:
    """Every unsettled item's next call, and where the newly settled items stopped (batch
    mode: each wave is one batch); the calibration items' calls all at once."""
    by_item: dict[int, list[Call]] = defaultdict(list)
    for slot in sorted(stored):
        by_item[slot[0]].append(stored[slot])
    wave, stops = [], {}
    for item_plan in item_plans(planned, spec):
        key = item_plan.calls[0].item.item_id
        if key in kept or (policy is None and key not in calibration):
            continue
        calls, stop = item_step(
            item_plan,
            by_item[item_plan.calls[0].item_db_id],
            policy or policy_of(spec),
            full=key in calibration,
        )
        if stop is not None:
            stops[key] = stop
        wave += calls
    return wave, stops


async def answer_adaptive(
    executor: CallExecutor,
    chunks: Callable[[], Iterable[Sequence[PlannedCall]]],
    keys: Sequence[str],
    *,
    kept: Mapping[str, StopRecord],
) -> tuple[dict[str, Stop], Calibration | None]:
    """Each item's calls one wave at a time until its policy settles it, a chunk at a time: a
    ``confident`` run's calibration items first, in full, then the others at the threshold
    chosen on them; the stops and the calibration."""
    run, spec, session = executor.rows.run, executor.spec, executor.rows.session
    sample = calibration_keys(spec, keys)
    stops: dict[str, Stop] = {}
    calibration, policy = None, policy_of(spec)
    calibrated: list[tuple[str, tuple[str, ...], list]] = []

    async def one(item_plan: ItemPlan, full: bool) -> None:
        while True:
            stored = item_calls(run.id, item_plan.calls[0].item_db_id, session=session)
            calls, stop = item_step(item_plan, stored, policy, full=full)
            if stop is not None:
                stops[item_plan.calls[0].item.item_id] = stop
                return
            if executor.halted:  # the item waits unsettled
                return
            await executor.answer(calls)

    for full in (True, False) if sample else (False,):
        if sample and not full:
            if executor.halted:
                break
            calibration = calibrate(spec.risk, spec.stop_on, calibrated, len(keys))
            policy = calibration.policy(spec.stop_on)
        for planned in chunks():
            plans = [p for p in item_plans(planned, spec) if p.calls[0].item.item_id not in kept]
            await gather_or_cancel(
                one(p, full) for p in plans if (p.calls[0].item.item_id in sample) == full
            )
            if full:
                calibrated += calibration_calls(planned, run, spec, sample, session=session)
    return stops, calibration


async def gather_or_cancel(coroutines: Iterable[Coroutine[Any, Any, Any]]) -> None:
    """Run ``coroutines`` at once; when one raises, cancel and await the others before raising,
    so that no call goes on after the run stopped."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
