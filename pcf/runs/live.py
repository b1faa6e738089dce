"""Live execution of a run: every call not stored yet is answered from the cache or asked of
the judge, and each answer is committed as it arrives, so an interrupted run resumes."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlmodel import Session

from pcf.items import Item
from pcf.judges import self_hosted
from pcf.judges.base import CallContext, Judge, JudgeError
from pcf.prices import call_cost
from pcf.processes import gc_frozen
from pcf.prompts import Rendered, parse_retry
from pcf.runs.adaptive import (
    answer_adaptive,
    executions_for,
    gather_or_cancel,
    record_stops,
)
from pcf.runs.budget import CostGuard, Ledger
from pcf.runs.call_plan import PlannedCall, Prepared, Slot, confirmations, in_chunks, plan
from pcf.runs.rows import Progress, RunReport, RunRows, failed_answer
from pcf.runs.spec import RunSpec
from pcf.store import (
    Call,
    Run,
    RunStatus,
    claim_keys,
    commit_retrying,
    item_db_ids,
    live_claims,
    release_keys,
    run_calls_by_slot,
    run_dataset,
    set_run_settings,
    set_run_status,
    update_run_totals,
    usage_peaks,
)

MAX_BACKOFF_S = 60.0
DRAIN_S = 60.0
"""How long an interrupted run waits for the answers in flight (a judge's own timeout also
ends each of them)."""
SIGNALS = (signal.SIGINT, signal.SIGTERM)


CLAIM_TTL_S = 60.0
"""How long a key claim outlives its holder's last sign of life (the run lease renews it)."""
CLAIM_POLL_S = 0.2
"""How often a run waiting for another run's answers looks whether they have come."""
FREE_BACKENDS = ("simulated", "replay")
"""Backends whose answers cost nothing: their requests are neither claimed nor reserved in the
spend ledger."""


class KeyClaims:
    """The content keys one run is asking now, claimed in the database so that another run
    needing the same answer waits for it instead of paying again; ``holder`` None claims none."""

    def __init__(self, session: Session, holder: str | None) -> None:
        self.session, self.holder = session, holder
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}
        self._poller: asyncio.Task[None] | None = None

    def claim(self, keys: Iterable[str]) -> set[str]:
        """Claim ``keys`` (committed); returns those held now, the others being asked elsewhere."""
        if self.holder is None:
            return set(keys)
        held = claim_keys(keys, session=self.session, holder=self.holder, ttl_s=CLAIM_TTL_S)
        self.session.commit()
        return held

    def release(self, key: str) -> None:
        """Give up the claim on ``key`` in the open transaction (committed with its row)."""
        if self.holder is not None:
            release_keys([key], session=self.session, holder=self.holder)

    async def freed(self, key: str) -> None:
        """Wait until no live run claims ``key``."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll())
        await future

    async def _poll(self) -> None:
        while self._waiting:
            await asyncio.sleep(CLAIM_POLL_S)
            held = live_claims(list(self._waiting), session=self.session)
            self.session.commit()
            for key in [key for key in self._waiting if key not in held]:
                for future in self._waiting.pop(key):
                    if not future.done():
                        future.set_result(None)


class CallExecutor:
    """Asks one judge the calls of a run and stores their rows, under the cost guard."""

    def __init__(self, rows: RunRows, judge: Judge, *, guard: CostGuard, claims: KeyClaims) -> None:
        self.rows, self.judge, self.spec = rows, judge, rows.spec
        self.guard, self.claims = guard, claims
        self.report = rows.report
        self.semaphore = asyncio.Semaphore(self.spec.concurrency)

    @property
    def capped(self) -> bool:
        """Whether the cost cap is reached: further calls wait for a higher one."""
        return self.report.capped > 0

    @property
    def halted(self) -> bool:
        """Whether no more calls are made: the cost cap is reached or the run was interrupted."""
        return self.capped or self.guard.stopped

    async def call(
        self, planned: PlannedCall, rendered: Rendered, key: str, *, claimed: bool = True
    ) -> None:
        """Answer one call; one another run is asking (not ``claimed``) waits for that answer."""
        while not claimed:
            await self.claims.freed(key)
            claimed = bool(self.claims.claim([key]))
            if self._from_cache([(planned, rendered, key)]):
                return
        async with self.semaphore:
            if self.rows.stopped:  # an answer could not be stored: pay for no other
                return
            await self._ask(planned, rendered, key)

    def _from_cache(self, prepared: Sequence[Prepared]) -> set[str]:
        """Store the calls whose answers another run stored meanwhile; returns their keys."""
        if self.claims.holder is None:
            return set()
        rows, _ = self.rows.cached(prepared)
        if rows:
            for row in rows:
                self.claims.release(row["content_key"])
            self.rows.commit(rows)
        return {row["content_key"] for row in rows}

    async def _ask(self, planned: PlannedCall, rendered: Rendered, key: str) -> None:
        """Ask the judge, retrying transport errors and unparseable answers (a parse retry
        names the failure, :func:`~pcf.prompts.parse_retry`, so it is not the same request
        again), each request reserved with the cost guard first."""
        context = CallContext(
            planned.item,
            planned.order,
            rendered.keys,
            "pairwise" if planned.pairwise else "listwise",
            planned.repeat_index,
        )
        request = rendered.request(self.spec.temperature, self.spec.max_tokens, context)
        tokens_in = tokens_out = attempts = transport_failures = parse_failures = 0
        outcome: dict | None = None
        while True:
            reservation = await self.guard.reserve(request)
            if reservation is None:  # the cap is reached (the call waits for a higher one), or
                if not self.guard.stopped:  # the run was interrupted
                    self.report.capped += 1
                if outcome is None:
                    self.claims.release(key)
                    self.rows.session.commit()
                    return
                break  # keep the paid answer that did not parse
            attempts += 1
            try:
                reply = await self.judge.complete(request)
            except JudgeError as exc:
                self.guard.failed(reservation, answered=exc.answered)
                transport_failures += 1
                if self._retries(exc) and transport_failures < self.spec.max_attempts:
                    await asyncio.sleep(self._backoff(transport_failures, exc.retry_after))
                    continue
                outcome = failed_answer(str(exc))
                break
            except BaseException:
                self.guard.unanswered(reservation)
                raise
            if reply.input_tokens is None or reply.output_tokens is None:
                self.guard.unanswered(reservation)  # billed unknown: it keeps its reservation
                self.report.usage_unknown += 1
            else:
                self.guard.settle(reservation, reply.input_tokens, reply.output_tokens)
            tokens_in += reply.input_tokens or 0
            tokens_out += reply.output_tokens or 0
            outcome = await self.rows.answered(planned, rendered, reply)
            if outcome["ok"] or reply.refusal or parse_failures >= self.spec.parse_retries:
                break  # a refusal is an answer, not a parse failure: it is not asked again
            parse_failures += 1
            request = parse_retry(request, outcome["error"])
        cost = call_cost(self.judge.model, tokens_in, tokens_out, self.guard.prices)
        self.report.unpriced |= cost is None and (tokens_in + tokens_out) > 0
        self.report.calls_made += attempts
        self.report.input_tokens += tokens_in
        self.report.output_tokens += tokens_out
        self.report.cost_usd += cost or 0.0
        row = (
            self.rows.base(planned, rendered, key)
            | outcome
            | {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "cost_usd": cost or 0.0,
                "attempts": attempts,
            }
        )
        self._store(row)

    def _store(self, row: dict[str, Any]) -> None:
        """Commit a call's row, releasing its key claim, with the bills kept so far."""
        ledger = self.guard.ledger
        try:
            self.claims.release(row["content_key"])
            self.rows.commit([row], also=None if ledger is None else ledger.write_bills)
        except BaseException:
            self.rows.stopped = True  # the answer could not be stored: pay for no other
            raise
        if ledger is not None:
            ledger.committed()

    def _retries(self, error: JudgeError) -> bool:
        """Whether a failed request is sent again: a retryable error, but not a timeout of a
        self-hosted server (:func:`~pcf.judges.self_hosted`), which goes on working on the
        abandoned request: sent again it would queue behind it, and time out again."""
        timed_out = error.reason == "timeout" and not error.answered
        return error.retryable and not (timed_out and self.local)

    @property
    def local(self) -> bool:
        """Whether the judge is a self-hosted server."""
        return self_hosted(self.spec.backend, self.spec.base_url)

    def _backoff(self, failures: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter, at least what the provider asked for."""
        wait = self.spec.backoff_s * 2 ** (failures - 1) * (0.5 + random.random())
        return min(MAX_BACKOFF_S, max(wait, retry_after or 0.0))

    async def answer(self, calls: Sequence[PlannedCall]) -> None:
        """Answer calls from the cache where possible (one transaction), the rest concurrently."""
        hit_rows, pending = self.rows.cached(self.rows.prepare(calls))
        if hit_rows:
            self.rows.commit(hit_rows)
        claimed = self.claims.claim(key for *_, key in pending)
        late = self._from_cache([p for p in pending if p[2] in claimed])
        await gather_or_cancel(
            self.call(*p, claimed=p[2] in claimed) for p in pending if p[2] not in late
        )


async def execute(
    run: Run,
    items: Iterable[Item],
    judge: Judge,
    spec: RunSpec,
    *,
    session: Session,
    prices: dict[str, tuple[float, float]],
    progress: Progress | None = None,
    retry_failed: bool = False,
    max_cost: float | None = None,
    recheck_stops: bool = False,
    holder: str | None = None,
    on_signal: Callable[[str], None] | None = None,
) -> RunReport:
    """Make every call of ``run`` that is not stored yet; each answer is committed at once.

    ``items`` is gone through twice, a chunk at a time, so memory does not grow with the run. With
    ``retry_failed``, failed calls are asked again (the failed answer kept as replaced); a request
    that would take the run's spend (its ledger, :class:`~pcf.runs.budget.Ledger`) past
    ``max_cost`` is not sent and the run is ``capped``. With ``on_signal``, SIGINT and SIGTERM
    interrupt the run gracefully (:func:`graceful_signals`), and it stays resumable."""
    if iter(items) is items:
        raise TypeError("execute goes through its items twice: give a list or DatasetItems")
    rows = RunRows(run, spec, judge.backend, judge.model, session=session, progress=progress)
    peaks = usage_peaks(run.id, session=session)
    if judge.backend in FREE_BACKENDS:
        holder, ledger = None, None
    else:
        holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        ledger = Ledger(run.id, session)
    spent = ledger.spent() if ledger is not None else 0.0
    guard = CostGuard(max_cost, judge.model, prices, peaks=peaks, spent=spent, ledger=ledger)
    executor = CallExecutor(rows, judge, guard=guard, claims=KeyClaims(session, holder))
    report = executor.report
    try:
        with graceful_signals(guard, report, on_signal):
            await _make_calls(executor, items, recheck_stops=recheck_stops, retry=retry_failed)
    except asyncio.CancelledError:
        if not report.interrupted:
            raise
        if report.stopped_at_once:
            raise KeyboardInterrupt from None
        # the answers still in flight when the wait ran out stay counted in the spend
    if ledger is not None:
        commit_retrying(session, ledger.write_bills)
        ledger.committed()
    if report.usage_unknown:  # the run's token totals are unknown from now on
        settings = run.settings.with_unknown_usage(report.usage_unknown)
        set_run_settings(run, settings, session=session)
    if not report.interrupted:  # an interrupted run stays running: without its lease, interrupted
        status = RunStatus.CAPPED if executor.capped else RunStatus.FINISHED
        set_run_status(run, status, session=session)
    update_run_totals(run.id, session=session)
    session.commit()
    return report


async def _make_calls(
    executor: CallExecutor, items: Iterable[Item], *, recheck_stops: bool, retry: bool
) -> None:
    """The calls of :func:`execute`, a chunk of items at a time (adaptive: in waves)."""
    rows, spec, report = executor.rows, executor.spec, executor.report
    run, session = rows.run, rows.session
    db_ids = item_db_ids(run.dataset_id, session=session)
    plan_spec, dataset_seed = executions_for(spec, items), run_dataset(run, session=session).seed

    def planned_of(chunk: Sequence[Item]) -> list[PlannedCall]:  # confirmations aside
        return plan(chunk, db_ids, plan_spec, dataset_seed=dataset_seed)

    def stored_of(chunk: Sequence[Item]) -> dict[Slot, Call]:
        ids = [db_ids[item.item_id] for item in chunk]
        return run_calls_by_slot(run.id, session=session, item_ids=ids)

    for chunk in in_chunks(items):
        planned, stored = planned_of(chunk), stored_of(chunk)
        to_do = sum(_open(p, stored, retry) for p in planned)
        report.planned += len(planned)
        report.to_do += to_do
        report.already_done += len(planned) - to_do
    set_run_status(run, RunStatus.RUNNING, session=session)
    session.commit()
    with gc_frozen():
        for chunk in in_chunks(items):
            if executor.guard.stopped:
                return
            planned, stored = planned_of(chunk), stored_of(chunk)
            if retry:
                report.retried += rows.retry(call for call in stored.values() if not call.ok)
            if spec.adaptive == "off":
                await executor.answer([p for p in planned if _open(p, stored, retry)])
            if spec.protocol == "apoc":
                stored = stored_of(chunk)
                if retry:  # a failed confirmation is asked again too
                    stored = {slot: call for slot, call in stored.items() if call.ok}
                second = confirmations(planned, stored, spec)
                report.to_do += len(second)
                await executor.answer(second)
        if spec.adaptive != "off":
            kept = {} if recheck_stops else dict(run.settings.stops)
            stops, calibration = await answer_adaptive(
                executor,
                lambda: (planned_of(chunk) for chunk in in_chunks(items)),
                [item.item_id for item in items],
                kept=kept,
            )
            record_stops(run, spec, kept, stops, session=session, calibration=calibration)


@contextmanager
def graceful_signals(
    guard: CostGuard, report: RunReport, say: Callable[[str], None] | None
) -> Iterator[None]:
    """Meanwhile, with ``say``, the first SIGINT or SIGTERM stops the run sending and gives the
    answers in flight up to :data:`DRAIN_S` seconds (saying so); a second one, or the end of
    that wait, cancels the running task (``report.stopped_at_once`` for a second signal)."""
    if say is None:
        yield
        return
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    timer: asyncio.TimerHandle | None = None

    def interrupted(number: int) -> None:
        nonlocal timer
        if report.interrupted:
            report.stopped_at_once = True
            say("stopping now: the answers in flight stay counted in the run's spend")
            task.cancel()
            return
        report.interrupted = number
        guard.stop()
        say(
            f"{signal.Signals(number).name}: sending no more requests; waiting up to "
            f"{DRAIN_S:g} s for the {guard.in_flight} answers in flight (Ctrl-C again to "
            "stop now)"
        )
        timer = loop.call_later(DRAIN_S, task.cancel)

    for number in SIGNALS:
        loop.add_signal_handler(number, interrupted, number)
    try:
        yield
    finally:
        for number in SIGNALS:
            loop.remove_signal_handler(number)
        if timer is not None:
            timer.cancel()


def _open(planned: PlannedCall, stored: Mapping[Slot, Call], retry_failed: bool) -> bool:
    """Whether a planned call is still to be made: not stored, or failed and asked again."""
    call = stored.get(planned.slot)
    return call is None or (retry_failed and not call.ok)
