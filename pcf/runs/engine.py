"""The run engine: plan the calls of a run, answer them from the cache or the judge, and
commit every answered call as it arrives, so an interrupted run resumes where it stopped."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from pcf.files import DATA_FILE, InputFileError, open_input
from pcf.items import Item
from pcf.judges import judge_server
from pcf.judges.base import CallContext, Judge, JudgeError, JudgeReply, configured_keys, redact
from pcf.orderings import canonical_order, schedule
from pcf.pairwise import is_ballpark_question, needs_confirmation
from pcf.parsing import parse_listwise, parse_pairwise
from pcf.prices import call_cost
from pcf.processes import gc_frozen
from pcf.prompts import Rendered, neutral_keys, render_listwise, render_pairwise
from pcf.runs.adaptive import answer_in_waves, executions_for, kept_stops, record_stops
from pcf.runs.spec import RunSpec
from pcf.store.models import Call, Run, RunStatus
from pcf.store.queries import (
    cached_calls,
    insert_calls,
    keep_duplicate_answers,
    replace_calls,
    run_calls_by_slot,
    run_dataset,
    set_run_status,
    update_run_totals,
)

MAX_BACKOFF_S = 60.0
INLINE_PARSE_CHARS = 65_536
"""Longer answers are cleaned and parsed in a worker thread, off the event loop."""
MAX_RAW_DEPTH = 64
"""A raw response nested deeper is stored with ``[nested too deep]`` in place of the rest."""
NUL_REPAIR = "nul_replaced"
"""The repair recorded when NUL characters of an answer were stored as U+FFFD."""


@dataclass(frozen=True)
class PlannedCall:
    """One call to make: an item under one ordering, with its slot keys."""

    item: Item
    item_db_id: int
    execution: int
    call_index: int
    order: tuple[str, ...]
    keys: tuple[str, ...] | None  # None: the default slot keys A, B, ...
    repeat_index: int
    pairwise: bool

    def render(self) -> Rendered:
        """The prompt of this call."""
        render = render_pairwise if self.pairwise else render_listwise
        return render(self.item, self.order, self.keys)


Slot = tuple[int, int, int]
"""Where a call sits in a run: (item database id, execution, call index)."""
Prepared = tuple[PlannedCall, Rendered, str]
"""A planned call with its rendered prompt and content key."""


def plan(
    items: Sequence[Item], db_ids: dict[str, int], spec: RunSpec, *, dataset_seed: int = 0
) -> list[PlannedCall]:
    """Every call of the run except APOCJudge's confirmation calls, which depend on answers.

    Canonical orders come from the dataset's seed (``pcf import --seed``, 0 by default) and the
    item id, never from the run's seed, so every run of a dataset shares its canonical orders
    and direct baseline; the run's seed drives the random draws of the schedule.
    ``repeat_index`` counts earlier calls of the same item with the same ordering (and keys),
    across executions, so identical prompts stay distinct calls in the cache.
    """
    out: list[PlannedCall] = []
    for item in items:
        seen: Counter[tuple[str, ...]] = Counter()
        if spec.protocol == "apoc":
            if len(item.candidates) != 2:
                raise ValueError(
                    f"item {item.item_id}: apoc needs pairs, got {len(item.candidates)}"
                )
            first = canonical_order(item.candidate_ids, dataset_seed, item.item_id)
            orders = [first, first[::-1]]
            executions = 1
        else:
            orders = schedule(
                spec.schedule,
                item.candidate_ids,
                spec.k,
                dataset_seed=dataset_seed,
                item_id=item.item_id,
                seed=spec.seed,
            )
            executions = spec.executions
        for execution in range(executions):
            for call_index, order in enumerate(orders):
                out.append(
                    PlannedCall(
                        item,
                        db_ids[item.item_id],
                        execution,
                        call_index,
                        order,
                        None,
                        seen[order],
                        spec.protocol == "apoc",
                    )
                )
                seen[order] += 1
    return out


def content_key(
    backend: str, model: str, rendered: Rendered, spec: RunSpec, repeat: int, *, server: bool = True
) -> str:
    """The cache key of a call: backend, model, prompt text, sampling settings, repeat index;
    for the simulated judge also the run seed (its noise follows the seed), for a replay the
    recording's bytes (another file is another judge), for a provider reached through another
    server than its own that server (:func:`~pcf.judges.judge_server`), since another server
    is another judge under the same model name. ``server=False`` gives the key as it was made
    before servers were part of it (batches sent then carry it as their custom id)."""
    payload = [
        backend,
        model,
        rendered.system,
        rendered.user,
        rendered.schema,
        spec.temperature,
        spec.max_tokens,
        repeat,
    ]
    if backend == "simulated":
        payload.append(spec.seed)
    elif backend == "replay" and spec.replay is not None:
        payload.append(recording_digest(Path(spec.replay)))
    elif server and (address := judge_server(backend, spec.base_url)) is not None:
        payload.append(address)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def recording_digest(path: Path) -> str:
    """The SHA-256 of a replay recording, read once per version of the file.

    Raises:
        ValueError: the file cannot be read.
    """
    try:
        stat = path.stat()
        return _file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    except OSError as exc:
        raise ValueError(f"replay recording {path}: {exc.strerror or exc}") from exc
    except InputFileError as exc:  # not a regular file, or over the cap
        raise ValueError(f"replay recording {exc}") from exc


@functools.lru_cache(maxsize=8)
def _file_digest(path: str, size: int, modified_ns: int) -> str:
    """SHA-256 of a file's bytes; ``size`` and ``modified_ns`` key the cache to its version."""
    digest = hashlib.sha256()
    with open_input(path, DATA_FILE) as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stored_reply(reply: JudgeReply) -> tuple[str, dict[str, Any], list[str]]:
    """A reply's text and raw response as they are stored, and the repair made, if any.

    API keys are masked (:func:`~pcf.judges.base.redact`), NUL characters (which PostgreSQL's
    text columns refuse) become U+FFFD and are recorded as the ``nul_replaced`` repair, numbers
    JSON cannot hold (NaN, infinity) become strings, and nesting stops at
    :data:`MAX_RAW_DEPTH`, so whatever a provider sends can be stored.
    """
    had_nul, keys = False, configured_keys()

    def clean(text: str) -> str:
        nonlocal had_nul
        if "\x00" in text:
            had_nul, text = True, text.replace("\x00", "\ufffd")
        return redact(text, keys)

    def storable(value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return clean(value)
        if isinstance(value, dict | list) and depth >= MAX_RAW_DEPTH:
            return "[nested too deep]"
        if isinstance(value, dict):
            return {clean(str(k)): storable(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [storable(v, depth + 1) for v in value]
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value

    text, raw = clean(reply.text), storable(reply.raw, 0)
    return text, raw, [NUL_REPAIR] if had_nul else []


def failed_answer(error: str) -> dict[str, Any]:
    """The answer fields of a call left without a usable reply: its ``reason: message`` error
    stored like an answer (no key, no NUL, at most 500 characters)."""
    return {
        "ok": False,
        "error": redact(error.replace("\x00", "\ufffd"))[:500],
        "repaired": [],
        "judgment": None,
        "response_text": None,
        "response_raw": None,
        "latency_s": 0.0,
    }


@dataclass
class RunReport:
    """What one invocation of :func:`execute` did, updated as calls are answered.

    ``to_do`` counts the calls this invocation has to answer and ``done`` those answered so
    far (by the judge or the cache); ``first_error`` is the first failed call's error.
    """

    planned: int = 0
    already_done: int = 0
    retried: int = 0
    to_do: int = 0
    done: int = 0
    calls_made: int = 0
    cache_hits: int = 0
    failures: int = 0
    duplicates: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str | None = None
    capped: int = 0

    @property
    def mostly_failed(self) -> bool:
        """Whether most of the calls this invocation answered failed."""
        return self.done > 0 and self.failures * 2 > self.done

    def failure_cause(self) -> str:
        """One line: how many calls failed, by reason, and the first error."""
        reasons = ", ".join(f"{reason} x{n}" for reason, n in self.errors.most_common())
        return f"{self.failures} of {self.done} calls failed ({reasons}); first: {self.first_error}"

    def as_dict(self) -> dict[str, Any]:
        """The report as a run summary's ``this_invocation``."""
        return {
            "planned": self.planned,
            "already_stored": self.already_done,
            "retried_failed": self.retried,
            "calls_made": self.calls_made,
            "cache_hits": self.cache_hits,
            "failures": self.failures,
            "errors": dict(self.errors),
            "duplicate_answers": self.duplicates,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "unpriced_model": self.unpriced,
            "not_made_over_cost_cap": self.capped,
        }


Progress = Callable[[RunReport], None]
"""Called with the invocation's report after every answered call."""


class CallExecutor:
    """Runs planned calls against one judge and records them in one session."""

    def __init__(
        self,
        run: Run,
        judge: Judge,
        spec: RunSpec,
        *,
        session: Session,
        prices: dict[str, tuple[float, float]],
        progress: Progress | None,
        budget_usd: float | None = None,
    ) -> None:
        self.run, self.judge, self.spec, self.session = run, judge, spec, session
        self.prices, self.progress, self.budget_usd = prices, progress, budget_usd
        self.report = RunReport()
        self.semaphore = asyncio.Semaphore(spec.concurrency)
        self._replacing: dict[Slot, int] = {}
        self.stopped = False

    def retry(self, failed: Iterable[Call]) -> int:
        """Store the next answers at these failed calls' slots as their replacements (each
        failed answer is kept as a ``retried`` replaced call); returns how many."""
        slots = {(call.item_id, call.execution, call.call_index): call.id for call in failed}
        self._replacing |= slots
        return len(slots)

    @property
    def capped(self) -> bool:
        """Whether the cost cap is reached: further calls wait for a higher one."""
        return self.report.capped > 0

    def _store(self, rows: list[dict[str, Any]]) -> None:
        """Commit new calls, and new answers of retried failed calls (the failed answer is
        kept as a replaced call)."""
        new = [row for row in rows if _slot(row) not in self._replacing]
        if new:
            insert_calls(new, session=self.session)
        retried = {self._replacing[_slot(r)]: r for r in rows if _slot(r) in self._replacing}
        if retried:
            replace_calls(retried, session=self.session)
        self.session.commit()
        for row in rows:
            self._replacing.pop(_slot(row), None)

    def commit(self, rows: list[dict[str, Any]]) -> None:
        """Store rows of calls in one transaction (a judge's answer alone, as it arrives).

        A plain INSERT of the rows, without building ORM objects or a unit of work: this runs
        in the event loop once per call, and every millisecond it takes is taken from the
        judge's SDK (see ``benchmarks/runner_throughput.py``). A call that another writer
        stored meanwhile does not stop the run: the answer is kept as a duplicate of it. Any
        other error (a full disk...) stops it: no call is made after it.
        """
        try:
            self._store(rows)
        except IntegrityError:
            self.session.rollback()
            for row in rows:
                self._commit_alone(row)
        except Exception:
            self.stopped = True
            raise
        for row in rows:
            if not row["ok"]:
                self.report.failures += 1
                self.report.errors[(row["error"] or "failed").split(":")[0]] += 1
                self.report.first_error = self.report.first_error or row["error"]
            self.report.done += 1
            if self.progress:
                self.progress(self.report)

    def _commit_alone(self, row: dict[str, Any]) -> None:
        """Store one call, or keep it as a duplicate when its slot is taken."""
        try:
            self._store([row])
        except IntegrityError:
            self.session.rollback()
            keep_duplicate_answers([row], session=self.session)
            self.session.commit()
            self.report.duplicates += 1

    def call_key(self, planned: PlannedCall, rendered: Rendered) -> str:
        """The call's content key (its cache key and batch custom id)."""
        return content_key(
            self.judge.backend, self.judge.model, rendered, self.spec, planned.repeat_index
        )

    def base_row(self, planned: PlannedCall, rendered: Rendered, key: str) -> dict[str, Any]:
        """The columns of the call's row that do not depend on the answer, with the request
        as sent and the item's texts it was rendered from (the store keeps the request as a
        template that refers to them)."""
        item = planned.item
        return {
            "run_id": self.run.id,
            "item_id": planned.item_db_id,
            "execution": planned.execution,
            "call_index": planned.call_index,
            "repeat_index": planned.repeat_index,
            "order": list(planned.order),
            "keys": list(rendered.keys),
            "content_key": key,
            "request": {
                "backend": self.judge.backend,
                "model": self.judge.model,
                "system": rendered.system,
                "user": rendered.user,
                "schema": rendered.schema,
                "temperature": self.spec.temperature,
                "max_tokens": self.spec.max_tokens,
            },
            "request_texts": (item.prompt, [item.text_of(cid) for cid in planned.order]),
        }

    def _parse(self, planned: PlannedCall, rendered: Rendered, reply: JudgeReply) -> dict[str, Any]:
        """Fields of the row that come from the answer: ok, error, repairs, judgment."""
        if reply.refusal:
            return {"ok": False, "error": "refusal", "repaired": [], "judgment": None}
        if planned.pairwise:
            pair = parse_pairwise(reply.text, rendered.key_to_id)
            judgment: dict[str, Any] | None = None
            if pair.ok:
                judgment = {"verdict": pair.verdict, "confidence": pair.confidence}
            return {
                "ok": pair.ok,
                "error": pair.error,
                "repaired": list(pair.repaired),
                "judgment": judgment,
            }
        parsed = parse_listwise(reply.text, rendered.key_to_id, planned.order)
        judgment = None
        if parsed.ok:
            judgment = {
                "factuality": parsed.factuality,
                "hallucination_risk": parsed.hallucination_risk,
                "ranking": list(parsed.ranking),
                "confidence": parsed.confidence,
            }
        return {
            "ok": parsed.ok,
            "error": parsed.error,
            "repaired": list(parsed.repaired),
            "judgment": judgment,
        }

    async def answered(
        self, planned: PlannedCall, rendered: Rendered, reply: JudgeReply
    ) -> dict[str, Any]:
        """Fields of the row that come from a judge's reply, as stored and as parsed.

        A long answer is cleaned and parsed in a worker thread, so the event loop keeps serving
        the calls in flight meanwhile.
        """
        if len(reply.text) < INLINE_PARSE_CHARS:
            return self._answer_fields(planned, rendered, reply)
        return await asyncio.to_thread(self._answer_fields, planned, rendered, reply)

    def _answer_fields(
        self, planned: PlannedCall, rendered: Rendered, reply: JudgeReply
    ) -> dict[str, Any]:
        text, raw, repairs = stored_reply(reply)
        parsed = self._parse(planned, rendered, dataclasses.replace(reply, text=text))
        return parsed | {
            "repaired": repairs + parsed["repaired"],
            "response_text": text,
            "response_raw": raw,
            "latency_s": reply.latency_s,
        }

    def from_cache(
        self, planned: PlannedCall, rendered: Rendered, key: str, hit: Call
    ) -> dict[str, Any] | None:
        """The row of a call the content-keyed cache answers with ``hit``, or None.

        The same prompt text may label other candidate ids (the same texts in another item or
        dataset), so the stored answer is parsed again against this call's keys, as if the
        judge had given it now; were that not ok, the judge is asked instead.
        """
        reused = self._parse(planned, rendered, JudgeReply(text=hit.response_text or ""))
        if not reused["ok"]:
            return None
        self.report.cache_hits += 1
        return (
            self.base_row(planned, rendered, key)
            | reused
            | {
                "response_text": hit.response_text,
                "response_raw": hit.response_raw,
                "attempts": 0,
                "cached_from": hit.cached_from or hit.id,
            }
        )

    async def call(self, planned: PlannedCall, rendered: Rendered, key: str) -> None:
        """Answer one call with the judge, retrying transport errors and unparseable answers."""
        context = CallContext(
            planned.item,
            planned.order,
            rendered.keys,
            "pairwise" if planned.pairwise else "listwise",
            planned.repeat_index,
        )
        request = rendered.request(self.spec.temperature, self.spec.max_tokens, context)
        tokens_in = tokens_out = attempts = transport_failures = parse_failures = 0
        outcome: dict[str, Any]
        async with self.semaphore:
            if self.stopped:  # an answer could not be stored: pay for no other
                return
            if self.budget_usd is not None and self.report.cost_usd >= self.budget_usd:
                self.report.capped += 1  # the cost cap is reached: the call waits for a higher one
                return
            while True:
                attempts += 1
                try:
                    reply = await self.judge.complete(request)
                except JudgeError as exc:
                    transport_failures += 1
                    if exc.retryable and transport_failures < self.spec.max_attempts:
                        await asyncio.sleep(self._backoff(transport_failures, exc.retry_after))
                        continue
                    outcome = failed_answer(str(exc))
                    break
                tokens_in += reply.input_tokens
                tokens_out += reply.output_tokens
                outcome = await self.answered(planned, rendered, reply)
                if outcome["ok"] or parse_failures >= self.spec.parse_retries:
                    break
                parse_failures += 1
        cost = call_cost(self.judge.model, tokens_in, tokens_out, self.prices)
        self.report.unpriced |= cost is None and (tokens_in + tokens_out) > 0
        self.report.calls_made += attempts
        self.report.input_tokens += tokens_in
        self.report.output_tokens += tokens_out
        self.report.cost_usd += cost or 0.0
        row = (
            self.base_row(planned, rendered, key)
            | outcome
            | {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "cost_usd": cost or 0.0,
                "attempts": attempts,
            }
        )
        self.commit([row])

    def _backoff(self, failures: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter, at least what the provider asked for."""
        wait = self.spec.backoff_s * 2 ** (failures - 1) * (0.5 + random.random())
        return min(MAX_BACKOFF_S, max(wait, retry_after or 0.0))

    def prepare(self, calls: Sequence[PlannedCall]) -> list[Prepared]:
        """Each call with its rendered prompt and content key."""
        out = []
        for planned in calls:
            rendered = planned.render()
            out.append((planned, rendered, self.call_key(planned, rendered)))
        return out

    def cached(self, prepared: Sequence[Prepared]) -> tuple[list[dict[str, Any]], list[Prepared]]:
        """The rows of the calls the content-keyed cache answers (looked up in a few queries),
        and the calls left for the judge."""
        hits = cached_calls([key for *_, key in prepared], session=self.session)
        rows: list[dict[str, Any]] = []
        rest = []
        for planned, rendered, key in prepared:
            hit = hits.get(key)
            row = None if hit is None else self.from_cache(planned, rendered, key, hit)
            if row is None:
                rest.append((planned, rendered, key))
            else:
                rows.append(row)
        return rows, rest

    async def answer(self, calls: Sequence[PlannedCall]) -> None:
        """Answer calls from the cache where possible, the rest concurrently.

        The cache's answers are stored in one transaction before the first judge call; each
        judge answer is committed alone.
        """
        hit_rows, pending = self.cached(self.prepare(calls))
        if hit_rows:
            self.commit(hit_rows)
        await asyncio.gather(*(self.call(*p) for p in pending))


def _confirmation(planned_first: PlannedCall, spec: RunSpec) -> PlannedCall:
    """APOCJudge call 3: the first order again, with seeded neutral keys."""
    keys = neutral_keys(2, "apoc", spec.seed, planned_first.item.item_id)
    return PlannedCall(
        planned_first.item, planned_first.item_db_id, 0, 2, planned_first.order, keys, 0, True
    )


def confirmations(
    planned: Sequence[PlannedCall], stored: dict[tuple[int, int, int], Call], spec: RunSpec
) -> list[PlannedCall]:
    """APOCJudge's confirmation calls not stored yet where the first two answers need one."""
    out = []
    for first in (p for p in planned if p.call_index == 0):
        if (first.item_db_id, 0, 2) in stored:
            continue
        d1, d2 = (stored.get((first.item_db_id, 0, i)) for i in (0, 1))
        verdicts = (None if c is None else c.verdict() for c in (d1, d2))
        ballpark = is_ballpark_question(first.item.prompt)
        if needs_confirmation(*verdicts, ballpark=ballpark, guard=spec.ballpark_guard):
            out.append(_confirmation(first, spec))
    return out


def _slot(row: dict[str, Any]) -> Slot:
    return row["item_id"], row["execution"], row["call_index"]


async def execute(
    run: Run,
    items: Sequence[Item],
    judge: Judge,
    spec: RunSpec,
    *,
    session: Session,
    db_ids: dict[str, int],
    prices: dict[str, tuple[float, float]],
    progress: Progress | None = None,
    retry_failed: bool = False,
    budget_usd: float | None = None,
    recheck_stops: bool = False,
) -> RunReport:
    """Make every call of ``run`` that is not stored yet; each answer is committed at once.

    Calls already stored for the run are never made again, so running a finished run makes no
    judge call; with ``retry_failed``, failed calls are asked again, and each new answer
    becomes its call's current answer while the failed one is kept as a ``retried``
    :class:`~pcf.store.models.ReplacedCall`. With ``budget_usd``, no call is sent once this
    invocation spent that much (the calls in flight finish and are stored); the run is then
    ``capped`` instead of ``finished``, and resumes like any run. An adaptive run keeps the
    stops it recorded (whatever policy version made them) unless ``recheck_stops`` asks the
    current policy again about those items. Returns what this invocation did.
    """
    executor = CallExecutor(
        run,
        judge,
        spec,
        session=session,
        prices=prices,
        progress=progress,
        budget_usd=budget_usd,
    )
    stored = run_calls_by_slot(run.id, session=session)
    retried = 0
    if retry_failed:
        retried = executor.retry(call for call in stored.values() if not call.ok)
        stored = {slot: call for slot, call in stored.items() if call.ok}
    dataset_seed = run_dataset(run, session=session).seed
    planned = plan(items, db_ids, executions_for(spec, items), dataset_seed=dataset_seed)
    todo = [p for p in planned if (p.item_db_id, p.execution, p.call_index) not in stored]
    executor.report.to_do = len(todo)
    executor.report.planned = len(planned)
    executor.report.already_done = len(planned) - len(todo)
    executor.report.retried = retried
    set_run_status(run, RunStatus.RUNNING, session=session)
    session.commit()
    with gc_frozen():
        if spec.adaptive == "off":
            await executor.answer(todo)
        else:
            kept = kept_stops(run, recheck=recheck_stops)
            stops = await answer_in_waves(executor, planned, run, spec, session=session, kept=kept)
            record_stops(run, spec, kept, stops, session=session)
        if spec.protocol == "apoc":
            stored = run_calls_by_slot(run.id, session=session)
            second = confirmations(planned, stored, spec)
            executor.report.to_do += len(second)
            await executor.answer(second)
    set_run_status(
        run, RunStatus.CAPPED if executor.capped else RunStatus.FINISHED, session=session
    )
    update_run_totals(run.id, session=session)
    session.commit()
    return executor.report
