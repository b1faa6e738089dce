"""Batch mode: a run's calls sent through a provider's batch API, at the batch price, each
submission recorded before it is sent and each batch collected in one transaction, so a killed
submit or collect is finished, never paid twice (docs/costs.md, "Provider batches")."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlmodel import Session

from pcf.access import Actor, Permission, authorize
from pcf.judges import judge_server, make_judge
from pcf.judges.batch_api import BatchClient, BatchLostError, BatchResult, BatchStatus, batch_client
from pcf.prices import batch_prices, call_cost, price_table
from pcf.prompts import Rendered
from pcf.runs.adaptive import (
    calibration_calls,
    calibration_keys,
    executions_for,
    next_wave,
    policy_of,
    record_stops,
)
from pcf.runs.budget import CostGuard, Reservation
from pcf.runs.call_plan import (
    PlannedCall,
    Prepared,
    Slot,
    confirmations,
    in_chunks,
    plan,
)
from pcf.runs.estimate import dataset_of
from pcf.runs.manage import (
    CostCapError,
    Lease,
    check_start,
    default_cost_cap,
    leased,
    open_audited,
    require_price,
)
from pcf.runs.rows import RunRows, failed_answer
from pcf.runs.spec import RunSpec
from pcf.stopping import Calibration, Stop, StoppingPolicy, calibrate
from pcf.store import (
    Call,
    DatasetItems,
    ProviderBatch,
    Run,
    RunStatus,
    add_provider_batch,
    cached_calls,
    claimed_batch_ids,
    datasets,
    get_run,
    item_db_ids,
    items_by_ids,
    pending_batch_keys,
    reserve_spend,
    run_batches,
    run_calls_by_slot,
    run_dataset,
    run_spend,
    set_run_settings,
    set_run_status,
    settle_batch_spend,
    update_provider_batch,
    update_run_totals,
    usage_peaks,
    utc_now,
)

FIND_WINDOW = timedelta(minutes=10)
"""How far before a killed submission's record a provider's clock may have dated its batch."""
MISSING = {
    "expired": "batch_expired: the batch expired before this request ran",
    "cancelled": "batch_cancelled: the batch was cancelled before this request ran",
}

LOST_STATUS = "not_found"
"""The provider status recorded for a batch the provider answered 404 for."""


@dataclass
class BatchReport:
    """What a submit or collect did (``deferred``: requests left to other runs' batches; ``lost``:
    batches the provider answered 404 for; ``capped``: why the next wave was not sent;
    ``idle``: why a run not done has nothing to collect; ``over_cap``: a run done whose bills
    passed its cap)."""

    planned: int = 0
    stored: int = 0
    cache_hits: int = 0
    submitted: int = 0
    deferred: int = 0
    batches: list[str] = field(default_factory=list)
    pending: int = 0
    requests: int = 0
    finished: int = 0
    failures: int = 0
    cost_usd: float = 0.0
    lost: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    capped: str = ""
    idle: str = ""
    over_cap: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The report as printed by the CLI."""
        return self.__dict__ | {"cost_usd": round(self.cost_usd, 6)}


def spec_of(run: Run, *, session: Session) -> RunSpec:
    """The :class:`RunSpec` that made ``run``."""
    return RunSpec.from_run(run, run_dataset(run, session=session).name)


@dataclass(frozen=True)
class _Chunk:  # a chunk of the run's items
    planned: list[PlannedCall]
    calls: list[PlannedCall]
    stored: dict[Slot, Call]


@dataclass
class _Ended:
    """A batch record whose requests have their outcomes, to store as calls."""

    record: ProviderBatch
    outcomes: dict[str, BatchResult]
    hits: dict[str, Call] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    paid: set[str] = field(default_factory=set)
    billed: bool = True
    """Whether the provider's results say what it billed (not for a batch it lost)."""


class _Batcher:
    """One run's batch work in one session, a chunk of items at a time."""

    def __init__(self, run: Run, spec: RunSpec, client: BatchClient, *, session: Session) -> None:
        self.run, self.spec, self.client, self.session = run, spec, client, session
        self.prices = batch_prices(price_table())
        self.rows = RunRows(run, spec, client.judge.backend, client.judge.model, session=session)
        self.report = BatchReport()
        self.dataset_seed = run_dataset(run, session=session).seed
        self.items = DatasetItems(run.dataset_id, session=session, limit=spec.limit)
        self.db_ids = item_db_ids(run.dataset_id, session=session)
        self.plan_spec = executions_for(spec, self.items)
        self.kept = dict(run.settings.stops)
        self.stops: dict[str, Stop] = {}
        keys = [item.item_id for item in self.items]
        self.population = len(keys)  # the calibration sample's and the other items'
        self.sample = calibration_keys(spec, keys)
        self.calibration: Calibration | None = None
        self.renamed = self._renamed_keys()
        self._slots: dict[str, list[Slot]] | None = None

    def chunks(self) -> Iterator[_Chunk]:
        for items in in_chunks(self.items):
            planned = plan(items, self.db_ids, self.plan_spec, dataset_seed=self.dataset_seed)
            ids = [self.db_ids[item.item_id] for item in items]
            stored = run_calls_by_slot(self.run.id, session=self.session, item_ids=ids)
            yield _Chunk(planned, self._calls(planned, stored), stored)

    def _calls(self, planned: list[PlannedCall], stored: dict[Slot, Call]) -> list[PlannedCall]:
        """A chunk's calls now; an adaptive run's new stops are kept."""
        if self.spec.adaptive != "off":
            policy = self._policy()
            wave, stops = next_wave(
                planned, stored, self.spec, kept=self.kept, policy=policy, calibration=self.sample
            )
            self.stops |= stops
            return [p for p in planned if p.slot in stored] + wave
        if self.spec.protocol != "apoc":
            return planned
        return planned + confirmations(planned, stored, self.spec)

    def _policy(self) -> StoppingPolicy | None:
        """How the items outside the calibration sample stop; None until those have stopped."""
        if not self.sample:
            return policy_of(self.spec)
        if self.calibration is None and self.sample <= self.stops.keys() | self.kept.keys():
            calls = []
            for items in in_chunks(self.items):
                planned = plan(items, self.db_ids, self.plan_spec, dataset_seed=self.dataset_seed)
                calls += calibration_calls(
                    planned, self.run, self.spec, self.sample, session=self.session
                )
            self.calibration = calibrate(self.spec.risk, self.spec.stop_on, calls, self.population)
        return self.calibration.policy(self.spec.stop_on) if self.calibration else None

    def _renamed_keys(self) -> dict[str, str]:
        """``{custom id: content key}`` for requests sent under a key from before servers were
        part of it (``content_key(server=False)``), so their results still find their calls."""
        if judge_server(self.spec.backend, self.spec.base_url) is None:
            return {}
        records = run_batches(self.run.id, session=self.session)
        sent = {key for r in records if r.state != "collected" for key in r.custom_ids}
        if not sent:
            return {}
        renamed = {}
        for chunk in self.chunks():
            for planned, rendered, key in self.rows.prepare(chunk.calls):
                if (old := self.rows.key(planned, rendered, server=False)) in sent:
                    renamed[old] = key
        return renamed

    def sent_keys(self, record: ProviderBatch) -> list[str]:
        """The content keys of the calls a batch record carries."""
        return [self.renamed.get(key, key) for key in record.custom_ids]

    def entry(self, prepared: Prepared) -> dict[str, Any]:
        _, rendered, key = prepared
        return self.client.entry(key, rendered.request(self.spec.temperature, self.spec.max_tokens))

    # ------------------------------------------------------------------ submit

    def _guard(
        self,
        cap: float | None,
        guard: CostGuard,
        *,
        retry_failed: bool,
        own: set[str],
        carried: set[str],
    ) -> None:
        """Refuse to send anything when the requests to send may take the run's spend (its
        ledger, which counts its batches not collected yet at their reservations) past ``cap``
        (:class:`~pcf.runs.budget.CostGuard`)."""
        if cap is None:
            return
        spent = run_spend(self.run.id, session=self.session)
        count, bound = 0, 0.0  # the reserved price of requests that leave together
        for _, rendered, _ in self._unsent(retry_failed=retry_failed, own=own, carried=carried):
            request = rendered.request(self.spec.temperature, self.spec.max_tokens)
            count, bound = count + 1, bound + (guard.reservation(request).usd or 0.0)
        if spent + bound <= cap:
            return
        set_run_status(self.run, RunStatus.CAPPED, session=self.session)
        update_run_totals(self.run.id, session=self.session)
        self.session.commit()
        raise CostCapError(
            f"run {self.run.name!r}: its {count} batch requests may cost up to ${bound:.4f} at "
            "the batch price (each request's UTF-8 bytes and max_tokens, or the most a call of "
            f"the run was billed) on top of ${spent:.4f} spent or reserved (with its batches not "
            f"collected yet), over its cost cap of ${cap:.4f}; nothing was sent: raise it "
            "with `pcf judge ... --batch --max-cost USD` (collect keeps that cap) or judge "
            "fewer items"
        )

    def _unsent(
        self, *, retry_failed: bool, own: set[str], carried: set[str]
    ) -> Iterator[Prepared]:
        """Each request a submit would send now (one per content key)."""
        seen, deferred = set(), carried - own
        for chunk in self.chunks():
            _, _, rest = self._todo(chunk, retry_failed, own)
            for p in rest:
                if p[2] not in seen and p[2] not in deferred:
                    seen.add(p[2])
                    yield p

    async def submit(
        self,
        *,
        retry_failed: bool,
        max_requests: int | None,
        cap: float | None = None,
    ) -> None:
        """Finish killed submissions, store cache hits, and send the rest if they fit ``cap``."""
        records = run_batches(self.run.id, session=self.session)
        killed = [record for record in records if record.state == "submitting"]
        if killed:
            await self._finish_killed(killed)
        own = {key for r in records if r.state != "collected" for key in self.sent_keys(r)}
        carried = pending_batch_keys(session=self.session)
        peaks = usage_peaks(self.run.id, session=self.session)
        guard = CostGuard(None, self.spec.model, self.prices, peaks=peaks)
        self._guard(cap, guard, retry_failed=retry_failed, own=own, carried=carried)
        max_requests, max_bytes = max_requests or self.client.max_requests, self.client.max_bytes
        queued: dict[str, dict[str, Any]] = {}  # the next batch's entries by content key
        size, reserved = 0, list[Reservation]()

        async def flush() -> None:  # each batch is recorded, and reserved, before it is sent
            nonlocal size
            if queued:
                record = add_provider_batch(
                    self.run.id, uuid.uuid4().hex, list(queued), session=self.session
                )
                self._reserve(record, reserved)
                self.session.commit()
                await self.send(record, list(queued.values()))
                self.report.submitted += len(queued)
                queued.clear()
                size, reserved[:] = 0, []

        seen: set[str] = set()
        deferred: list[str] = []
        self.report.planned = 0
        for chunk in self.chunks():
            prepared, rows, rest = self._todo(chunk, retry_failed, own)
            self.report.planned += len(prepared)
            if rows:
                self.rows.commit(rows)
                self.report.stored += len(rows)
                self.report.cache_hits += len(rows)
            for p in rest:
                if p[2] in seen:
                    continue
                seen.add(p[2])
                if p[2] in carried:
                    deferred.append(p[2])
                else:
                    entry, length = self._sized_entry(p, max_bytes)
                    if queued and (len(queued) >= max_requests or size + length > max_bytes):
                        await flush()
                    queued[p[2]] = entry
                    size += length
                    reserved.append(guard.reservation(p[1].request(*self._sampling)))
        if deferred:
            self._defer(deferred)
        await flush()

    @property
    def _sampling(self) -> tuple[float, int]:
        return self.spec.temperature, self.spec.max_tokens

    def _sized_entry(self, prepared: Prepared, max_bytes: int) -> tuple[dict[str, Any], int]:
        """A request's batch entry and its size in bytes (a ValueError over ``max_bytes``)."""
        entry = self.entry(prepared)
        length = len(json.dumps(entry).encode()) + 1
        if length > max_bytes:
            raise ValueError(f"one request is {length} bytes, over the batch limit of {max_bytes}")
        return entry, length

    def _reserve(self, record: ProviderBatch, reservations: list[Reservation]) -> None:
        """Put a submission's requests, at their reservations, in the run's spend ledger."""
        usd = sum(r.usd or 0.0 for r in reservations)
        if usd:
            tokens = (
                max(r.input_tokens for r in reservations),
                max(r.output_tokens for r in reservations),
            )
            reserve_spend(
                self.run.id, usd, tokens, session=self.session, provider_batch_id=record.id
            )

    def _defer(self, keys: list[str]) -> None:
        """Record requests other runs' batches carry, to take from the cache once collected."""
        record = add_provider_batch(self.run.id, uuid.uuid4().hex, keys, session=self.session)
        update_provider_batch(record, session=self.session, state="deferred")
        self.session.commit()
        self.report.deferred = len(keys)

    def _todo(
        self, chunk: _Chunk, retry_failed: bool, own: set[str]
    ) -> tuple[list[Prepared], list[dict[str, Any]], list[Prepared]]:
        """A chunk's calls, the cache's rows of those not stored (nor sent in ``own``), and the
        rest, to send."""
        prepared = self.rows.prepare(chunk.calls)
        keep = {slot for slot, call in chunk.stored.items() if call.ok or not retry_failed}
        todo = [p for p in prepared if p[0].slot not in keep and p[2] not in own]
        asked = {p[0].slot for p in todo}  # failed calls asked again: their answers replace them
        self.rows.retry(call for slot, call in chunk.stored.items() if slot in asked)
        return prepared, *self.rows.cached(todo)

    async def _finish_killed(self, killed: list[ProviderBatch]) -> None:
        """Submissions a killed submit left: find each one's batch, or send it now."""
        wanted = {key for record in killed for key in self.sent_keys(record)}
        by_key: dict[str, Prepared] = {}
        for chunk in self.chunks():
            calls = chunk.planned + [p for p in chunk.calls if p not in chunk.planned]
            for p in self.rows.prepare(calls):
                if p[2] in wanted:
                    by_key.setdefault(p[2], p)
        for record in killed:
            await self._finish(record, [by_key[key] for key in self.sent_keys(record)])

    async def send(self, record: ProviderBatch, entries: list[dict[str, Any]]) -> None:
        """Send a recorded submission's requests and record its batch id."""

        def on_file(file_id: str) -> None:
            update_provider_batch(record, session=self.session, file_id=file_id)
            self.session.commit()

        batch_id = await self.client.submit(
            record.token, entries, file_id=record.file_id, on_file=on_file
        )
        self._submitted(record, batch_id)

    def _submitted(self, record: ProviderBatch, batch_id: str) -> None:
        update_provider_batch(
            record,
            session=self.session,
            state="submitted",
            batch_id=batch_id,
            submitted_at=utc_now(),
        )
        self.session.commit()
        self.report.batches.append(batch_id)

    async def _finish(self, record: ProviderBatch, prepared: list[Prepared]) -> None:
        found = await self.client.find(
            record.token,
            created_after=record.created_at - FIND_WINDOW,
            size=len(record.custom_ids),
            claimed=claimed_batch_ids(session=self.session),
        )
        if found is not None:
            self._submitted(record, found)
        else:
            await self.send(record, [self.entry(p) for p in prepared])
            self.report.submitted += len(prepared)

    # ------------------------------------------------------------------ collect

    async def collect(self, *, forget_lost: bool = False) -> None:
        """Store the results of every ended batch and answered deferred record; with
        ``forget_lost``, a batch the provider answers 404 for as failed calls."""
        self.report.pending = self.report.requests = self.report.finished = 0
        self.report.lost = []
        self._slots = None
        for record in run_batches(self.run.id, session=self.session):
            self.report.requests += len(record.custom_ids)
            ended: _Ended | None = None
            if record.state == "submitted":
                try:
                    ended = await self._ended_batch(record)
                except BatchLostError as lost:
                    ended = self._lost(record, lost, forget=forget_lost)
            elif record.state == "deferred":
                ended = self._ended_deferred(record)
            elif record.state == "submitting":
                self.report.pending += 1
            if ended is not None:
                await self._store(ended)
            if record.state == "collected":
                self.report.finished += len(record.custom_ids)

    async def _ended_batch(self, record: ProviderBatch) -> _Ended | None:
        """A submitted batch's outcomes once it ended, else None (BatchLostError on a 404)."""
        status = await self.client.status(record.batch_id or "")
        update_provider_batch(record, session=self.session, provider_status=status.status)
        self.session.commit()
        if not status.ended:
            self.report.pending += 1
            self.report.finished += status.finished
            return None
        results = [] if status.error else await self.client.results(status.batch_id)
        self.report.batches.append(status.batch_id)
        return _Ended(record, self._outcomes(record, results, status))

    def _lost(self, record: ProviderBatch, lost: BatchLostError, *, forget: bool) -> _Ended | None:
        """Mark a batch the provider answers 404 for; with ``forget``, its calls become failed."""
        update_provider_batch(record, session=self.session, provider_status=LOST_STATUS)
        self.session.commit()
        if not forget:
            self.report.lost.append(lost.batch_id)
            return None
        self.report.forgotten.append(lost.batch_id)
        error = f"batch_lost: {lost}; --retry-failed asks it again"
        outcomes = {key: BatchResult(key, error=error) for key in self.sent_keys(record)}
        return _Ended(record, outcomes, billed=False)  # it stays counted at its reservation

    def _ended_deferred(self, record: ProviderBatch) -> _Ended | None:
        """A deferred record's calls once the batches carrying them were collected."""
        carried = pending_batch_keys(session=self.session)
        if any(key in carried for key in record.custom_ids):
            self.report.pending += 1
            return None
        keys = self.sent_keys(record)
        hits = cached_calls(keys, session=self.session)
        gone = "batch_deferred: the other run's batch gave no usable answer; judge again"
        return _Ended(record, {key: BatchResult(key, error=gone) for key in keys}, hits)

    def _outcomes(
        self, record: ProviderBatch, results: list[BatchResult], status: BatchStatus
    ) -> dict[str, BatchResult]:
        """The outcome of each call of the record, by content key; a call without a result
        failed with the batch's reason."""
        by_key = {self.renamed.get(r.custom_id, r.custom_id): r for r in results}
        missing = f"batch_failed: {status.error}" if status.error else MISSING.get(status.status)
        missing = missing or "batch_missing: the provider returned no result for this request"
        return {
            key: by_key.get(key) or BatchResult(key, error=missing)
            for key in self.sent_keys(record)
        }

    def slots_sent(self) -> dict[str, list[Slot]]:
        """Where the calls of the run's uncollected batch records sit, by content key (worked
        out once per collect, however many batches end)."""
        if self._slots is None:
            records = run_batches(self.run.id, session=self.session)
            sent = {key for r in records if r.state != "collected" for key in self.sent_keys(r)}
            self._slots = defaultdict(list)
            for chunk in self.chunks():
                for planned, _, key in self.rows.prepare(chunk.calls):
                    if key in sent:
                        self._slots[key].append(planned.slot)
        return self._slots

    async def _store(self, ended: _Ended) -> None:
        """Store an ended record's outcomes as calls and mark it collected, in one transaction."""
        slots = {slot for key in ended.outcomes for slot in self.slots_sent().get(key, ())}
        item_ids = sorted({slot[0] for slot in slots})
        replaced: list[Call] = []
        for start in range(0, len(item_ids), datasets.ITEM_CHUNK):
            ids = item_ids[start : start + datasets.ITEM_CHUNK]
            items = items_by_ids(ids, session=self.session)
            planned = plan(items, self.db_ids, self.plan_spec, dataset_seed=self.dataset_seed)
            stored = run_calls_by_slot(self.run.id, session=self.session, item_ids=ids)
            calls = [p for p in self._calls(planned, stored) if p.slot in slots]
            for planned_call, rendered, key in self.rows.prepare(calls):
                current = stored.get(planned_call.slot)
                if key not in ended.outcomes or (
                    current is not None
                    and (current.ok or current.created_at >= ended.record.created_at)
                ):
                    continue  # stored before, by this collect or by an earlier one
                ended.rows.append(await self._row(ended, planned_call, rendered, key))
                if current is not None:
                    replaced.append(current)
        self.rows.retry(replaced)
        update_provider_batch(
            ended.record, session=self.session, state="collected", collected_at=utc_now()
        )
        if ended.billed:
            usd = sum(row.get("cost_usd", 0.0) for row in ended.rows)
            tokens = (
                max((row.get("input_tokens", 0) for row in ended.rows), default=0),
                max((row.get("output_tokens", 0) for row in ended.rows), default=0),
            )
            settle_batch_spend(ended.record.id, usd, tokens, session=self.session)
        if ended.rows:
            self.rows.commit(ended.rows)  # commits the record's new state with the rows
        self.session.commit()
        self.report.stored += len(ended.rows)
        self.report.failures += sum(not row["ok"] for row in ended.rows)

    async def _row(
        self, one: _Ended, planned: PlannedCall, rendered: Rendered, key: str
    ) -> dict[str, Any]:
        """A call's row: the cache's answer (a deferred record), else its request's outcome.
        Only the first call with a key is paid: one request answered them all."""
        row = self.rows.from_cache(planned, rendered, key, one.hits.get(key))
        if row is not None:
            self.report.cache_hits += 1
            return row
        paid = key not in one.paid
        one.paid.add(key)
        row = self.rows.base(planned, rendered, key)
        outcome = one.outcomes[key]
        reply = outcome.reply
        if reply is None:
            return row | failed_answer(outcome.error or "batch_error") | {"attempts": int(paid)}
        # the batch APIs (OpenAI's, Anthropic's) report every result's usage
        tokens_in, tokens_out = (
            (reply.input_tokens or 0, reply.output_tokens or 0) if paid else (0, 0)
        )
        cost = call_cost(self.spec.model, tokens_in, tokens_out, self.prices) or 0.0
        self.report.cost_usd += cost
        return (
            row
            | await self.rows.answered(planned, rendered, reply)
            | {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "cost_usd": cost,
                "attempts": int(paid),
            }
        )

    def finish(self) -> None:
        """Mark the run finished once it is done (recording an adaptive run's stops), else
        waiting for its batches."""
        done, spec, session = self.done(), self.spec, self.session
        if done and spec.adaptive != "off":
            kept, calibration = self.kept, self.calibration
            record_stops(self.run, spec, kept, self.stops, session=session, calibration=calibration)
        set_run_status(self.run, RunStatus.FINISHED if done else RunStatus.BATCH, session=session)
        update_run_totals(self.run.id, session=session)
        session.commit()
        cap = self.cap()
        if done and cap is not None and (spent := run_spend(self.run.id, session=session)) > cap:
            self.report.over_cap = (
                f"run {self.run.name!r} was billed ${spent:.4f}, over its cost cap of "
                f"${cap:.4f}: a batch is sent whole, reserved at its bound, and the provider "
                "billed above it (docs/costs.md); every call is stored"
            )

    def cap(self) -> float | None:
        """The cost cap of the run's latest submit (by default ``PCF_MAX_COST_USD``)."""
        stored = self.run.settings.batch_max_cost_usd
        return stored if stored is not None else default_cost_cap()

    def done(self) -> bool:
        """Whether every batch of the run is collected and every call is stored."""
        return not self.waiting() and not self.missing()

    def waiting(self) -> bool:
        """Whether a batch record of the run is not collected yet."""
        return any(r.state != "collected" for r in run_batches(self.run.id, session=self.session))

    def missing(self) -> int:
        """How many of the run's calls are not stored."""
        return sum(p.slot not in chunk.stored for chunk in self.chunks() for p in chunk.calls)


def client_for(spec: RunSpec) -> BatchClient:
    """The provider batch client of the run's judge."""
    judge = make_judge(spec.backend, spec.model, base_url=spec.base_url, seed=spec.seed)
    return batch_client(judge)


def submit_batches(
    spec: RunSpec,
    *,
    session: Session,
    actor: Actor,
    retry_failed: bool = False,
    max_requests: int | None = None,
    max_cost: float | None = None,
) -> tuple[Run, BatchReport]:
    """Create or resume the run and send its missing calls as provider batches; returns at once.

    Nothing is sent when the requests' upper-bound price would take the run's spend past
    ``max_cost`` (by default ``PCF_MAX_COST_USD``); the cap is kept for collect's waves."""
    check_start(spec, session=session, actor=actor)
    dataset_of(spec, session=session)
    cap = max_cost if max_cost is not None else default_cost_cap()
    require_price(spec, cap, price_table())
    client = client_for(spec)
    with leased(spec.run_name, session=session) as lease:
        details = {"batch": True, "max_cost_usd": cap}
        run = open_audited(spec, session=session, actor=actor, details=details)
        set_run_settings(run, run.settings.with_batch(spec.limit, cap), session=session)
        session.commit()
        batcher = _Batcher(run, spec, client, session=session)

        async def work() -> None:
            async with lease.heartbeat():
                try:
                    await batcher.submit(
                        retry_failed=retry_failed,
                        max_requests=max_requests,
                        cap=cap,
                    )
                finally:
                    await client.judge.aclose()

        asyncio.run(work())
        batcher.finish()
        return run, batcher.report


def existing_run(name: str, *, session: Session) -> Run:
    """The run ``name``, or a ValueError that says where runs are listed."""
    run = get_run(name, session=session)
    if run is None:
        raise ValueError(f"no run {name!r}; `pcf runs` lists them")
    return run


def collect_runs(
    names: Sequence[str],
    *,
    session: Session,
    actor: Actor,
    wait: bool = False,
    poll_s: float = 30.0,
    progress: Callable[[list[BatchReport]], None] | None = None,
    forget_lost: bool = False,
) -> list[BatchReport]:
    """Store the results of the runs' ended batches; with ``wait``, until every batch ended.

    A run's next wave (APOCJudge confirmations, adaptive waves) is submitted once its answers
    are stored, under the cap of its latest submit. A lost batch (404) is left as it is, or
    with ``forget_lost`` stored as failed calls ``batch_lost: ...``."""
    actor = authorize(actor, Permission.RUN, session=session)
    runs = [existing_run(name, session=session) for name in names]
    specs = [spec_of(run, session=session) for run in runs]

    async def collect_all(leases: list[Lease]) -> list[BatchReport]:
        batchers = [
            _Batcher(run, spec, client_for(spec), session=session)
            for run, spec in zip(runs, specs, strict=True)
        ]
        try:
            async with AsyncExitStack() as beats:
                for lease in leases:
                    await beats.enter_async_context(lease.heartbeat())
                while True:
                    for batcher in batchers:
                        if not batcher.report.capped and not batcher.report.idle:
                            await _collect_round(batcher, forget_lost)
                    if progress:
                        progress([b.report for b in batchers])
                    if not wait or all(
                        b.done()
                        or (b.report.lost and not b.report.pending)
                        or b.report.capped
                        or b.report.idle
                        for b in batchers
                    ):
                        break
                    await asyncio.sleep(poll_s)
        finally:
            for batcher in batchers:
                await batcher.client.judge.aclose()
        return [b.report for b in batchers]

    with ExitStack() as stack:
        return asyncio.run(
            collect_all([stack.enter_context(leased(name, session=session)) for name in names])
        )


async def _collect_round(batcher: _Batcher, forget_lost: bool) -> None:
    """Collect a run's ended batches and, once none is pending, send its next wave."""
    await batcher.collect(forget_lost=forget_lost)
    records = len(run_batches(batcher.run.id, session=batcher.session))
    waves = batcher.spec.protocol == "apoc" or batcher.spec.adaptive != "off"
    if batcher.report.pending == 0 and waves:
        try:
            await batcher.submit(retry_failed=False, max_requests=None, cap=batcher.cap())
        except CostCapError as capped:  # the run is capped: nothing more to wait for
            batcher.report.capped = str(capped)
            return
        await batcher.collect(forget_lost=forget_lost)
    sent = len(run_batches(batcher.run.id, session=batcher.session)) > records  # a next wave
    # A run in waves plans its calls wave by wave (an adaptive item stops early): only a run
    # planned whole can tell a missing call from one it will never need.
    if not waves and not sent and not batcher.waiting() and (missing := batcher.missing()):
        batcher.report.idle = (
            f"run {batcher.run.name!r} has nothing to collect: no batch of it is waiting and "
            f"{missing} of its calls are not stored (its status is {batcher.run.status}); "
            "`pcf judge ... --batch` sends them"
        )
        return
    batcher.finish()
