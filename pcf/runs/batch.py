"""Batch mode: a run's calls sent through a provider's batch API, at the batch price.

``submit_run`` plans the run, stores what the content-keyed cache answers, and sends the rest
under their content keys as custom ids, split by the provider's limits; each submission is
recorded before the provider is asked, so a killed submit is finished (its batch found, or its
uploaded file reused) instead of paid twice. Keys that another run's batch already carries are
not sent again: a ``deferred`` record takes them from the cache once that batch is collected.
``collect_runs`` stores each ended batch's results as ordinary calls (parsed like any answer,
priced at the batch price), with the batch marked collected in the same transaction, so a
collect killed at any point and run again stores each answer exactly once. Errors, expired and
cancelled requests are failed calls with their reason; ``--retry-failed`` asks them again.
A batch the provider answers 404 for is reported as lost and left as it is (another key or
server gets 404 too); ``forget_lost`` turns it into failed calls (``batch_lost``) instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlmodel import Session

from pcf.access import Actor, Permission
from pcf.judges import judge_server, make_judge
from pcf.judges.batch import BatchClient, BatchLostError, BatchResult, BatchStatus, batch_client
from pcf.prices import batch_prices, call_cost, price_table
from pcf.prompts import Rendered
from pcf.runs.adaptive import executions_for, kept_stops, next_wave, record_stops
from pcf.runs.manage import Lease, check_start, leased, open_run, require_dataset
from pcf.runs.plan import PlannedCall, Prepared, Slot, confirmations, content_key, plan
from pcf.runs.rows import RunRows, failed_answer
from pcf.runs.spec import LIMIT_SETTING, RunSpec
from pcf.stopping import Stop
from pcf.store.models import Call, ProviderBatch, Run, RunStatus, utc_now
from pcf.store.queries import (
    add_audit_event,
    add_provider_batch,
    cached_calls,
    claimed_batch_ids,
    get_run,
    item_db_ids,
    load_items,
    pending_batch_keys,
    run_batches,
    run_calls_by_slot,
    run_dataset,
    set_run_setting,
    set_run_status,
    update_provider_batch,
    update_run_totals,
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
    """What a submit or collect did.

    Attributes:
        planned: calls of the run.
        stored: calls stored by this invocation (from the cache or from results).
        cache_hits: calls the content-keyed cache answered.
        submitted: requests sent in new batches (one per content key).
        deferred: requests left to batches of other runs that already carry them.
        batches: provider batch ids submitted (submit) or collected (collect).
        pending: the run's batches not ended yet.
        requests: requests of the run's batch records, deferred ones included (collect).
        finished: of those, requests the provider finished or whose results are stored.
        failures: failed calls stored.
        cost_usd: cost of the calls stored, at the batch price.
        lost: batches the provider answered 404 for, left as they are (collect).
        forgotten: lost batches whose requests were stored as failed calls (collect with
            ``forget_lost``).
    """

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

    def as_dict(self) -> dict[str, Any]:
        """The report as printed by the CLI."""
        return self.__dict__ | {"cost_usd": round(self.cost_usd, 6)}


def spec_of(run: Run, *, session: Session) -> RunSpec:
    """The :class:`RunSpec` that made ``run`` (:meth:`RunSpec.from_run`)."""
    return RunSpec.from_run(run, run_dataset(run, session=session).name)


class _Batcher:
    """One run's batch work in one session: plan, submit, collect."""

    def __init__(self, run: Run, spec: RunSpec, client: BatchClient, *, session: Session) -> None:
        self.run, self.spec, self.client, self.session = run, spec, client, session
        self.prices = batch_prices(price_table())
        self.rows = RunRows(run, spec, client.judge.backend, client.judge.model, session=session)
        self.report = BatchReport()
        dataset = run_dataset(run, session=session)
        self.items = load_items(run.dataset_id, session=session)[: spec.limit]
        self.db_ids = item_db_ids(run.dataset_id, session=session)
        self.planned = plan(
            self.items, self.db_ids, executions_for(spec, self.items), dataset_seed=dataset.seed
        )
        self.kept = kept_stops(run, recheck=False)
        self.stops: dict[str, Stop] = {}
        self._prepared: dict[Slot, Prepared] = {}
        self.renamed = self._renamed_keys()

    def _renamed_keys(self) -> dict[str, str]:
        """``{custom id: content key}`` for the requests the run's uncollected batches sent
        under their key from before servers were part of it (``content_key(server=False)``),
        so that their results still find their calls."""
        if judge_server(self.spec.backend, self.spec.base_url) is None:
            return {}
        records = run_batches(self.run.id, session=self.session)
        sent = {key for r in records if r.state != "collected" for key in r.custom_ids}
        if not sent:
            return {}
        calls = self.planned
        if self.spec.protocol == "apoc":
            stored = run_calls_by_slot(self.run.id, session=self.session)
            calls = calls + confirmations(self.planned, stored, self.spec)
        renamed = {}
        for planned in calls:
            rendered = planned.render()
            old = content_key(
                self.spec.backend,
                self.spec.model,
                rendered,
                self.spec,
                planned.repeat_index,
                server=False,
            )
            if old in sent:
                renamed[old] = self.rows.key(planned, rendered)
        return renamed

    def sent_keys(self, record: ProviderBatch) -> list[str]:
        """The content keys of the calls a batch record carries."""
        return [self.renamed.get(key, key) for key in record.custom_ids]

    def calls(self, stored: dict[Slot, Call]) -> list[PlannedCall]:
        """The run's calls now: APOCJudge's confirmations once their first answers are in; for
        an adaptive run, the calls made and the next wave (each unsettled item's next call)."""
        if self.spec.adaptive != "off":
            wave, self.stops = next_wave(
                self.planned, self.run, self.spec, session=self.session, kept=self.kept
            )
            return [p for p in self.planned if _slot_of(p) in stored] + wave
        if self.spec.protocol != "apoc":
            return self.planned
        return self.planned + confirmations(self.planned, stored, self.spec)

    def prepare(self, calls: Sequence[PlannedCall]) -> list[Prepared]:
        """The calls rendered with their content keys, each rendered once per run (a call's
        slot always holds the same call: the plan's, or its APOCJudge confirmation)."""
        new = [p for p in calls if _slot_of(p) not in self._prepared]
        self._prepared |= {_slot_of(p[0]): p for p in self.rows.prepare(new)}
        return [self._prepared[_slot_of(p)] for p in calls]

    def entry(self, prepared: Prepared) -> dict[str, Any]:
        _, rendered, key = prepared
        return self.client.entry(key, rendered.request(self.spec.temperature, self.spec.max_tokens))

    # ------------------------------------------------------------------ submit

    async def submit(
        self, *, retry_failed: bool, max_requests: int | None, max_bytes: int | None
    ) -> None:
        """Finish killed submissions, store cache hits, send the rest in new batches."""
        stored = run_calls_by_slot(self.run.id, session=self.session)
        prepared = self.prepare(self.calls(stored))
        self.report.planned = len(prepared)
        records = run_batches(self.run.id, session=self.session)
        killed = [record for record in records if record.state == "submitting"]
        if killed:
            by_key = {p[2]: p for p in self.prepare(self.planned) + prepared}
            for record in killed:
                await self._finish(record, [by_key[key] for key in self.sent_keys(record)])
        keep = {slot for slot, call in stored.items() if call.ok or not retry_failed}
        own = {key for r in records if r.state != "collected" for key in self.sent_keys(r)}
        todo = [p for p in prepared if _slot_of(p[0]) not in keep and p[2] not in own]
        rows, rest = self.rows.cached(todo)
        self._retry_failed(rows, stored)
        if rows:
            self.rows.commit(rows)
            self.report.stored += len(rows)
            self.report.cache_hits += len(rows)
        carried = pending_batch_keys(session=self.session)
        unique: dict[str, Prepared] = {}
        for p in rest:
            unique.setdefault(p[2], p)
        deferred = [key for key in unique if key in carried]
        if deferred:
            record = add_provider_batch(
                self.run.id, uuid.uuid4().hex, deferred, session=self.session
            )
            update_provider_batch(record, session=self.session, state="deferred")
            self.session.commit()
            self.report.deferred = len(deferred)
        sending = [p for key, p in unique.items() if key not in carried]
        for chunk in _chunks(
            [(p, self.entry(p)) for p in sending],
            max_requests or self.client.max_requests,
            max_bytes or self.client.max_bytes,
        ):
            keys = [p[2] for p, _ in chunk]
            record = add_provider_batch(self.run.id, uuid.uuid4().hex, keys, session=self.session)
            self.session.commit()
            await self._send(record, [entry for _, entry in chunk])
            self.report.submitted += len(keys)

    async def _send(self, record: ProviderBatch, entries: list[dict[str, Any]]) -> None:
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
        """A submission a killed submit left: find its batch, or send it now."""
        found = await self.client.find(
            record.token,
            created_after=record.created_at - FIND_WINDOW,
            size=len(record.custom_ids),
            claimed=claimed_batch_ids(session=self.session),
        )
        if found is not None:
            self._submitted(record, found)
        else:
            await self._send(record, [self.entry(p) for p in prepared])
            self.report.submitted += len(prepared)

    # ------------------------------------------------------------------ collect

    async def collect(self, *, forget_lost: bool = False) -> None:
        """Store the results of every ended batch of the run, and deferred calls answered;
        with ``forget_lost``, a batch the provider answers 404 for as failed calls."""
        self.report.pending = self.report.requests = self.report.finished = 0
        self.report.lost = []
        for record in run_batches(self.run.id, session=self.session):
            self.report.requests += len(record.custom_ids)
            if record.state == "submitted":
                try:
                    await self._collect_batch(record)
                except BatchLostError as lost:
                    await self._lost(record, lost, forget=forget_lost)
            elif record.state == "deferred":
                await self._store_deferred(record)
            elif record.state == "submitting":
                self.report.pending += 1
            if record.state == "collected":
                self.report.finished += len(record.custom_ids)

    async def _collect_batch(self, record: ProviderBatch) -> None:
        """Store a submitted batch's results once it ended.

        Raises:
            BatchLostError: the provider answers 404 for the batch or its results.
        """
        status = await self.client.status(record.batch_id or "")
        update_provider_batch(record, session=self.session, provider_status=status.status)
        self.session.commit()
        if not status.ended:
            self.report.pending += 1
            self.report.finished += status.finished
            return
        results = [] if status.error else await self.client.results(status.batch_id)
        await self._store(record, self._outcomes(record, results, status))
        self.report.batches.append(status.batch_id)

    async def _lost(self, record: ProviderBatch, lost: BatchLostError, *, forget: bool) -> None:
        """Mark a batch the provider answers 404 for; with ``forget``, store its calls not
        stored yet as failed calls that ``--retry-failed`` asks again (and mark it collected)."""
        update_provider_batch(record, session=self.session, provider_status=LOST_STATUS)
        self.session.commit()
        if not forget:
            self.report.lost.append(lost.batch_id)
            return
        error = f"batch_lost: {lost}; --retry-failed asks it again"
        await self._store(
            record, {key: BatchResult(key, error=error) for key in self.sent_keys(record)}
        )
        self.report.forgotten.append(lost.batch_id)

    async def _store_deferred(self, record: ProviderBatch) -> None:
        carried = pending_batch_keys(session=self.session)
        if any(key in carried for key in record.custom_ids):
            self.report.pending += 1
            return
        keys = self.sent_keys(record)
        hits = cached_calls(keys, session=self.session)
        gone = "batch_deferred: the other run's batch gave no usable answer; judge again"
        await self._store(record, {key: BatchResult(key, error=gone) for key in keys}, hits)

    def _outcomes(
        self, record: ProviderBatch, results: list[BatchResult], status: BatchStatus
    ) -> dict[str, BatchResult]:
        """The outcome of each call of the record, by content key (see :meth:`sent_keys`)."""
        if self.renamed:
            results = [
                dataclasses.replace(r, custom_id=self.renamed.get(r.custom_id, r.custom_id))
                for r in results
            ]
        return _outcomes(self.sent_keys(record), results, status)

    async def _store(
        self,
        record: ProviderBatch,
        outcomes: dict[str, BatchResult],
        hits: dict[str, Call] | None = None,
    ) -> None:
        """Store the outcomes of a record's keys, and mark it collected, in one transaction."""
        stored = run_calls_by_slot(self.run.id, session=self.session)
        wanted = set(self.sent_keys(record))
        rows, paid = [], set()
        for planned, rendered, key in self.prepare(self.calls(stored)):
            if key not in wanted:
                continue
            current = stored.get(_slot_of(planned))
            if current is not None and (current.ok or current.created_at >= record.created_at):
                continue  # stored before, by this collect or by an earlier one
            hit = (hits or {}).get(key)
            row = None if hit is None else self.rows.from_cache(planned, rendered, key, hit)
            if row is None:
                row = await self._row(planned, rendered, key, outcomes[key], paid=key not in paid)
                paid.add(key)
            else:
                self.report.cache_hits += 1
            rows.append(row)
        self._retry_failed(rows, stored)
        update_provider_batch(
            record, session=self.session, state="collected", collected_at=utc_now()
        )
        if rows:
            self.rows.commit(rows)  # commits the record's new state with the rows
        self.session.commit()
        self.report.stored += len(rows)
        self.report.failures += sum(not row["ok"] for row in rows)

    async def _row(
        self,
        planned: PlannedCall,
        rendered: Rendered,
        key: str,
        outcome: BatchResult,
        *,
        paid: bool,
    ) -> dict[str, Any]:
        """A call's row from its request's outcome; ``paid`` is False for a second call with
        the same content key in the batch (one request answered both: no tokens, no cost)."""
        row = self.rows.base(planned, rendered, key)
        reply = outcome.reply
        if reply is None:
            return row | failed_answer(outcome.error or "batch_error") | {"attempts": int(paid)}
        tokens_in, tokens_out = (reply.input_tokens, reply.output_tokens) if paid else (0, 0)
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

    def _retry_failed(self, rows: list[dict[str, Any]], stored: dict[Slot, Call]) -> None:
        """Have the rows that land on stored failed calls replace them (each failed answer
        kept as a ``retried`` replaced call)."""
        slots = [(row["item_id"], row["execution"], row["call_index"]) for row in rows]
        self.rows.retry(stored[s] for s in slots if s in stored and not stored[s].ok)

    def lost_only(self) -> bool:
        """Whether the last collect left lost batches and nothing to wait for."""
        return bool(self.report.lost) and not self.report.pending

    def done(self) -> bool:
        """Whether every batch of the run is collected and every call is stored."""
        records = run_batches(self.run.id, session=self.session)
        stored = run_calls_by_slot(self.run.id, session=self.session)
        calls = self.calls(stored)
        return all(r.state == "collected" for r in records) and all(
            _slot_of(p) in stored for p in calls
        )


def _slot_of(planned: PlannedCall) -> Slot:
    return planned.item_db_id, planned.execution, planned.call_index


def _chunks(
    entries: list[tuple[Prepared, dict[str, Any]]], max_requests: int, max_bytes: int
) -> Iterator[list[tuple[Prepared, dict[str, Any]]]]:
    """``entries`` in batches of at most ``max_requests`` requests and ``max_bytes`` of JSON."""
    chunk: list[tuple[Prepared, dict[str, Any]]] = []
    size = 0
    for prepared, entry in entries:
        length = len(json.dumps(entry).encode()) + 1
        if length > max_bytes:
            raise ValueError(f"one request is {length} bytes, over the batch limit of {max_bytes}")
        if chunk and (len(chunk) >= max_requests or size + length > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append((prepared, entry))
        size += length
    if chunk:
        yield chunk


def _outcomes(
    keys: list[str], results: list[BatchResult], status: BatchStatus
) -> dict[str, BatchResult]:
    """Each key's result; a key without one failed with the batch's reason."""
    by_key = {result.custom_id: result for result in results}
    if status.error:
        missing = f"batch_failed: {status.error}"
    else:
        missing = MISSING.get(
            status.status, "batch_missing: the provider returned no result for this request"
        )
    return {key: by_key.get(key) or BatchResult(key, error=missing) for key in keys}


def _client(spec: RunSpec) -> BatchClient:
    judge = make_judge(spec.backend, spec.model, base_url=spec.base_url, seed=spec.seed)
    return batch_client(judge)


def submit_run(
    spec: RunSpec,
    *,
    session: Session,
    actor: Actor,
    retry_failed: bool = False,
    max_requests: int | None = None,
    max_bytes: int | None = None,
) -> tuple[Run, BatchReport]:
    """Create or resume the run and send its missing calls as provider batches; returns at once.

    ``max_requests`` and ``max_bytes`` lower the provider's limits per batch. ``actor`` must be
    allowed to run, and the server's key to go where the batches go (see
    :func:`~pcf.runs.manage.check_start`).

    Raises:
        AccessDeniedError: the actor may not start the run.
        ValueError: no dataset, a backend without a batch API, or no key.
        RunConflictError: a run of that name exists with other settings.
        RunBusyError: another live process holds the run.
        BatchAPIError: the provider refused a request.
    """
    check_start(spec, actor=actor)
    require_dataset(spec, session=session)
    client = _client(spec)
    with leased(spec.run_name, session=session) as lease:
        resumed = get_run(spec.run_name, session=session) is not None
        run = open_run(spec, session=session)
        add_audit_event(
            "run_resumed" if resumed else "run_started",
            session=session,
            actor=actor.identity,
            target=spec.run_name,
            details={"backend": spec.backend, "model": spec.model, "batch": True},
        )
        set_run_setting(run, LIMIT_SETTING, spec.limit, session=session)
        session.commit()
        batcher = _Batcher(run, spec, client, session=session)

        async def work() -> None:
            async with lease.heartbeat():
                try:
                    await batcher.submit(
                        retry_failed=retry_failed, max_requests=max_requests, max_bytes=max_bytes
                    )
                finally:
                    await client.aclose()

        asyncio.run(work())
        _finish_run(batcher)
        return run, batcher.report


def _finish_run(batcher: _Batcher) -> None:
    done = batcher.done()
    if done and batcher.spec.adaptive != "off":
        record_stops(
            batcher.run, batcher.spec, batcher.kept, batcher.stops, session=batcher.session
        )
    status = RunStatus.FINISHED if done else RunStatus.BATCH
    set_run_status(batcher.run, status, session=batcher.session)
    update_run_totals(batcher.run.id, session=batcher.session)
    batcher.session.commit()


def _existing(name: str, *, session: Session) -> Run:
    run = get_run(name, session=session)
    if run is None:
        raise ValueError(f"no run {name!r}; `pcf runs` lists them")
    return run


def batch_status(name: str, *, session: Session) -> list[dict[str, Any]]:
    """The run's batches with their progress as the provider reports it (collected ones as
    stored); a batch the provider answers 404 for has provider status ``not_found``."""
    run = _existing(name, session=session)
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
            await client.aclose()

    asyncio.run(read(_client(spec_of(run, session=session))))
    return rows


def cancel_runs(names: Sequence[str], *, session: Session, actor: Actor) -> dict[str, Any]:
    """Ask the provider to cancel the runs' batches not ended yet (``actor`` must be allowed
    to run).

    Collect then stores what each batch answered before it stopped, and the rest as failed
    calls (``batch_cancelled``), which ``--retry-failed`` asks again.

    Returns:
        ``{"cancelled": [batch ids asked], "lost": {run: [batch ids]}}``, where lost batches
        are those the provider answers 404 for.
    """
    actor.require(Permission.RUN)
    runs = [_existing(name, session=session) for name in names]
    cancelled: list[str] = []
    lost: dict[str, list[str]] = {}

    async def cancel(run: Run) -> None:
        client = _client(spec_of(run, session=session))
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
            await client.aclose()

    for run in runs:
        asyncio.run(cancel(run))
    return {"cancelled": cancelled, "lost": lost}


def batch_overview(runs: Sequence[Run], *, session: Session) -> list[dict[str, Any]]:
    """The runs that sent batches, as stored (no provider call): for each, its batches,
    how many are collected, whether some are left to collect, and the ids of those the
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

    An APOCJudge run's confirmation calls (its second wave) are submitted once its first
    answers are stored, and waited for too with ``wait``. A batch the provider answers 404
    for (status or results) is listed in its report's ``lost`` and left as it is; with
    ``forget_lost`` its calls not stored yet are stored as failed calls ``batch_lost: ...``
    instead (``--retry-failed`` asks them again) and it is listed in ``forgotten``.

    Raises:
        AccessDeniedError: ``actor`` may not run (collecting resumes the runs).
        ValueError: no run of that name, or one that is not a batch run.
        RunBusyError: another live process holds one of the runs.
        BatchAPIError: the provider refused a request.
    """
    actor.require(Permission.RUN)
    runs = [_existing(name, session=session) for name in names]
    specs = [spec_of(run, session=session) for run in runs]
    with ExitStack() as stack:
        leases = [stack.enter_context(leased(name, session=session)) for name in names]
        return asyncio.run(
            _collect_all(runs, specs, leases, session, wait, poll_s, progress, forget_lost)
        )


async def _collect_all(
    runs: list[Run],
    specs: list[RunSpec],
    leases: list[Lease],
    session: Session,
    wait: bool,
    poll_s: float,
    progress: Callable[[list[BatchReport]], None] | None,
    forget_lost: bool,
) -> list[BatchReport]:
    batchers = [
        _Batcher(run, spec, _client(spec), session=session)
        for run, spec in zip(runs, specs, strict=True)
    ]
    try:
        async with AsyncExitStack() as beats:
            for lease in leases:
                await beats.enter_async_context(lease.heartbeat())
            await _collect_rounds(batchers, wait, poll_s, progress, forget_lost)
    finally:
        for batcher in batchers:
            await batcher.client.aclose()
    return [b.report for b in batchers]


async def _collect_rounds(
    batchers: list[_Batcher],
    wait: bool,
    poll_s: float,
    progress: Callable[[list[BatchReport]], None] | None,
    forget_lost: bool,
) -> None:
    """Collect every run's ended batches (and send its next wave) until none is left to wait
    for, or once without ``wait``."""
    while True:
        for batcher in batchers:
            await batcher.collect(forget_lost=forget_lost)
            waves = batcher.spec.protocol == "apoc" or batcher.spec.adaptive != "off"
            if batcher.report.pending == 0 and waves:
                await batcher.submit(retry_failed=False, max_requests=None, max_bytes=None)
                await batcher.collect(forget_lost=forget_lost)
            _finish_run(batcher)
        if progress:
            progress([b.report for b in batchers])
        if not wait or all(b.done() or b.lost_only() for b in batchers):
            break
        await asyncio.sleep(poll_s)
