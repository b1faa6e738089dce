"""Runs and their calls: run rows, the content-keyed cache, stored requests and answers,
provider batches, and a run's judgments read back. Functions flush, never commit."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Text,
    case,
    cast,
    delete,
    event,
    func,
    insert,
    or_,
)
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session, col, select

from pcf.judgments import Judgment
from pcf.processes import gc_paused
from pcf.run_settings import RunSettings
from pcf.store.datasets import ITEM_CHUNK, _chunks, items_by_ids, list_datasets, rows_changed
from pcf.store.leases import ACTIVE_RUN_STATUSES, _lease, lease_is_live
from pcf.store.models import (
    Call,
    Dataset,
    ItemRow,
    ProviderBatch,
    ReplacedCall,
    RequestTemplate,
    Run,
    RunLease,
    RunResult,
    RunStatus,
    Spend,
    insert_new,
    saved,
    utc_now,
)
from pcf.store.requests import rebuilt_request, stored_request
from pcf.store.spend import billed_peaks
from pcf.store.webhooks import RUN_EVENTS, run_event

SECRET_SETTING_WORDS = ("api_key", "apikey", "secret", "password", "authorization")


def _secret_setting(settings: Mapping[str, Any]) -> str | None:
    """The first key (at any depth) that looks like it holds a credential."""
    for key, value in settings.items():
        if any(word in str(key).lower() for word in SECRET_SETTING_WORDS):
            return str(key)
        if isinstance(value, Mapping) and (found := _secret_setting(value)):
            return found
    return None


def create_run(
    name: str,
    *,
    session: Session,
    dataset_id: int,
    protocol: str,
    backend: str,
    model: str,
    k: int,
    schedule: str,
    seed: int = 0,
    executions: int = 1,
    weights: Mapping[str, float] | None = None,
    settings: RunSettings | None = None,
    base_url: str | None = None,
) -> Run:
    """Record a new pending run called ``name``; ``settings`` never hold API keys.

    Raises:
        ValueError: the name is taken, no such dataset, an argument out of range, or
            ``settings`` holding what looks like a credential.
    """
    if k < 1 or executions < 1:
        raise ValueError(f"k and executions must be at least 1, got k={k}, executions={executions}")
    settings = settings or RunSettings()
    if (secret := _secret_setting(settings.stored())) is not None:
        raise ValueError(
            f"run settings must not hold credentials ({secret!r}); keys come from the environment"
        )
    if session.get(Dataset, dataset_id) is None:
        raise ValueError(f"no dataset with id {dataset_id}; import one first")
    if get_run(name, session=session) is not None:
        raise ValueError(f"a run named {name!r} already exists; choose another name")
    run = Run(
        name=name,
        dataset_id=dataset_id,
        protocol=protocol,
        backend=backend,
        model=model,
        base_url=base_url,
        k=k,
        schedule=schedule,
        seed=seed,
        executions=executions,
        weights=dict(weights or {}),
        settings=settings,
    )
    return saved(run, session=session)


def get_run(name: str, *, session: Session) -> Run | None:
    """The run called ``name``, or None."""
    return session.exec(select(Run).where(Run.name == name)).first()


def run_dataset(run: Run, *, session: Session) -> Dataset:
    """The dataset ``run`` judges (every run has one: a foreign key)."""
    return session.get_one(Dataset, run.dataset_id)


def set_run_status(run: Run, status: RunStatus | str, *, session: Session) -> Run:
    """Record the run's status; ``finished`` also stamps ``finished_at``. A run that comes to
    ``finished``, ``capped`` or ``failed`` queues ``run.<status>`` for the webhooks."""
    before, run.status = run.status, RunStatus(status).value
    if run.status == RunStatus.FINISHED:
        run.finished_at = utc_now()
    saved(run, session=session)
    if run.status != before and run.status in RUN_EVENTS:
        run_event(run, f"run.{run.status}", session=session)
    return run


def set_run_settings(run: Run, settings: RunSettings, *, session: Session) -> Run:
    """Store the run's ``settings`` (from ``run.settings``' ``with_`` methods)."""
    run.settings = settings
    return saved(run, session=session)


def list_runs(*, session: Session, dataset_id: int | None = None) -> list[Run]:
    """Every run, oldest first; only the runs of ``dataset_id`` when given."""
    query = select(Run).order_by(col(Run.id))
    if dataset_id is not None:
        query = query.where(Run.dataset_id == dataset_id)
    return list(session.exec(query).all())


def update_run_totals(run_id: int, *, session: Session) -> Run:
    """Store on the run its totals over its calls: ``calls_made`` counts the attempts of the
    calls the cache did not answer (which alone count for tokens and cost), ``cache_hits`` the
    others, ``failures`` the calls left failed."""
    run = session.get_one(Run, run_id)
    paid = col(Call.cached_from).is_(None)

    def paid_sum(column: Any) -> Any:
        return func.coalesce(func.sum(case((paid, column), else_=0)), 0)

    totals = session.exec(
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            paid_sum(Call.attempts),
            func.coalesce(func.sum(case((paid, 0), else_=1)), 0),
            func.coalesce(func.sum(case((col(Call.ok), 0), else_=1)), 0),
            paid_sum(Call.input_tokens),
            paid_sum(Call.output_tokens),
            paid_sum(Call.cost_usd),
        ).where(Call.run_id == run_id)
    ).one()
    names = ("calls_made", "cache_hits", "failures", "input_tokens", "output_tokens", "cost_usd")
    run.sqlmodel_update(dict(zip(names, (*totals[:-1], float(totals[-1])), strict=True)))
    return saved(run, session=session)


def usage_peaks(run_id: int, *, session: Session) -> tuple[int, int]:
    """The most input and output tokens one stored call, or one settled request in the run's
    spend, was billed for."""
    peaks = session.exec(
        select(func.max(Call.input_tokens), func.max(Call.output_tokens)).where(
            Call.run_id == run_id
        )
    ).one()
    billed = billed_peaks(run_id, session=session)
    return max(peaks[0] or 0, billed[0]), max(peaks[1] or 0, billed[1])


def run_states(runs: Iterable[Run], *, session: Session) -> dict[int, str]:
    """``{run id: status to show}``: the stored one, but ``interrupted`` for a pending or
    running run without a live lease (its process died; judging it again resumes it)."""
    fresh = select(RunLease).execution_options(populate_existing=True)
    live = {lease.run_name for lease in session.exec(fresh).all() if lease_is_live(lease)}
    return {
        run.id: "interrupted"
        if run.status in ACTIVE_RUN_STATUSES and run.name not in live
        else run.status
        for run in runs
    }


def run_listing(*, session: Session, dataset_id: int | None = None) -> list[dict[str, Any]]:
    """The runs (of one dataset, or all), oldest first, as ``pcf runs`` and the Runs page list
    them: name, dataset, settings (the judge's server as given), status to show
    (:func:`run_states`), calls, tokens, cost."""
    runs = list_runs(session=session, dataset_id=dataset_id)
    names = {d.id: d.name for d in list_datasets(session=session)}
    states = run_states(runs, session=session)
    settings = ("protocol", "backend", "model", "base_url", "k", "schedule", "executions")
    totals = ("cache_hits", "failures", "input_tokens", "output_tokens", "cost_usd")
    return [
        {"name": r.name, "dataset": names.get(r.dataset_id)}
        | {field: getattr(r, field) for field in settings}
        | {"status": states[r.id], "calls": r.calls_made}
        | {field: getattr(r, field) for field in totals}
        for r in runs
    ]


def delete_run(name: str, *, session: Session) -> dict[str, int]:
    """Delete the run ``name`` with its calls, replaced answers and stored results (never a
    label: labels belong to items); ``{"calls": n, "replaced_calls": m}`` deleted.

    Raises:
        ValueError: no such run, a live process judging it, or other runs reusing its answers.
    """
    run = get_run(name, session=session)
    if run is None:
        raise ValueError(f"no run {name!r}; `pcf runs` lists them")
    lease = _lease(name, session=session)
    if lease is not None and lease_is_live(lease):
        raise ValueError(
            f"run {name!r} is being judged now (process {lease.pid} on {lease.host}); "
            "wait for it to finish"
        )
    calls = select(Call.id).where(Call.run_id == run.id)
    reusers = session.exec(
        select(Run.name)
        .join(Call, col(Call.run_id) == Run.id)
        .where(col(Call.cached_from).in_(calls), Call.run_id != run.id)
        .distinct()
    ).all()
    if reusers:
        raise ValueError(
            f"runs {', '.join(sorted(reusers))} reuse answers of run {name!r} from the cache; "
            "delete them first"
        )
    replaced = session.execute(delete(ReplacedCall).where(col(ReplacedCall.call_id).in_(calls)))
    deleted = session.execute(delete(Call).where(col(Call.run_id) == run.id))
    session.execute(delete(RunLease).where(col(RunLease.run_name) == name))
    session.execute(delete(Spend).where(col(Spend.run_id) == run.id))
    session.execute(delete(ProviderBatch).where(col(ProviderBatch.run_id) == run.id))
    session.execute(delete(RunResult).where(col(RunResult.run_id) == run.id))
    session.delete(run)
    session.flush()
    return {"calls": rows_changed(deleted), "replaced_calls": rows_changed(replaced)}


def _answered() -> Any:
    """Calls with a provider's answer: ok, or paid for and failed (not parsed, refused)."""
    return or_(col(Call.ok), col(Call.response_text).is_not(None))


def cached_calls(content_keys: Iterable[str], *, session: Session) -> dict[str, Call]:
    """The answers to reuse: ``{content_key: the newest ok call with that key, in any run}``,
    else the newest answer that failed to parse (paid for once: it is not asked again)."""
    found: dict[str, Call] = {}
    for chunk in _chunks(content_keys):
        rows = session.exec(
            select(Call)
            .where(col(Call.content_key).in_(chunk), _answered())
            .order_by(col(Call.ok).desc(), col(Call.created_at).desc(), col(Call.id).desc())
        )
        for call in rows:
            found.setdefault(call.content_key, call)
    return found


def answered_keys(content_keys: Iterable[str], *, session: Session) -> set[str]:
    """The content keys among ``content_keys`` that a call answered (the cache's hits)."""
    answered = select(Call.content_key).where(_answered())
    chunks = _chunks(content_keys)
    return {k for c in chunks for k in session.exec(answered.where(col(Call.content_key).in_(c)))}


TEMPLATE_IDS = "pcf.request_template_ids"  # session.info: {digest: id} of committed templates
NEW_TEMPLATE_IDS = "pcf.new_request_template_ids"  # the same, seen in the open transaction


@event.listens_for(OrmSession, "after_commit")
def _keep_template_ids(session: OrmSession) -> None:
    """The templates a transaction saw exist for good once it commits."""
    session.info.setdefault(TEMPLATE_IDS, {}).update(session.info.pop(NEW_TEMPLATE_IDS, {}))


@event.listens_for(OrmSession, "after_transaction_end")
def _forget_new_template_ids(session: OrmSession, _transaction: Any) -> None:
    """A transaction that ends without a commit may have taken its new templates with it."""
    session.info.pop(NEW_TEMPLATE_IDS, None)


def request_template_id(values: Mapping[str, Any], *, session: Session) -> int:
    """The id of the template with these column values, stored first if new.

    ``INSERT ... ON CONFLICT DO NOTHING`` then a select: two writers storing the same template
    at once both get the one row. Ids are remembered per session, once committed.
    """
    digest = values["digest"]
    for known in (TEMPLATE_IDS, NEW_TEMPLATE_IDS):
        if (found := session.info.get(known, {}).get(digest)) is not None:
            return found
    insert_new(RequestTemplate, dict(values), session=session)
    found = session.exec(select(RequestTemplate.id).where(RequestTemplate.digest == digest)).one()
    session.info.setdefault(NEW_TEMPLATE_IDS, {})[digest] = found
    return found


def stored_call(row: Mapping[str, Any], *, session: Session) -> dict[str, Any]:
    """A call's column values as stored: a ``request`` (with the ``request_texts``, the item's
    prompt and slot texts, its template refers to) becomes ``template_id``, ``request_digest``."""
    values = dict(row)
    if "request" not in values:
        return values
    template, digest = stored_request(values.pop("request"), values.pop("request_texts", None))
    values["template_id"] = request_template_id(template, session=session)
    values["request_digest"] = digest
    return values


def insert_calls(rows: Iterable[Mapping[str, Any]], *, session: Session) -> None:
    """Store calls given as column values (:func:`stored_call`), stamped now.

    A plain INSERT, no ORM objects: it runs in the engine's event loop once per answer, and
    its time is taken from the judge's SDK (``benchmarks/runner_throughput.py``).
    """
    now = utc_now()
    values = [{"created_at": now, **stored_call(row, session=session)} for row in rows]
    session.execute(insert(Call), values)


def call_request(call: Call, *, session: Session) -> dict[str, Any]:
    """The request ``call`` sent, rebuilt from its template and the item's texts
    (``call.sent(request)`` checks it against the stored digest)."""
    [request] = call_requests([call], session=session)
    return request


def call_requests(calls: Sequence[Call], *, session: Session) -> list[dict[str, Any]]:
    """:func:`call_request` of each call, each template and item read once."""
    templates = {
        t.id: t
        for t in session.exec(
            select(RequestTemplate).where(
                col(RequestTemplate.id).in_(sorted({call.template_id for call in calls}))
            )
        )
    }
    ids = sorted({call.item_id for call in calls})
    items = {
        item.metadata["db_id"]: item
        for start in range(0, len(ids), ITEM_CHUNK)
        for item in items_by_ids(ids[start : start + ITEM_CHUNK], session=session)
    }
    return [
        rebuilt_request(
            templates[call.template_id],
            items[call.item_id].prompt,
            [items[call.item_id].text_of(key) for key in call.order],
        )
        for call in calls
    ]


def keep_duplicate_answers(rows: Iterable[Mapping[str, Any]], *, session: Session) -> None:
    """Keep answers to calls the run stored already (a second writer's) as ``duplicate``
    replaced calls: no paid answer is lost."""
    for row in rows:
        stored = session.exec(
            select(Call.id).where(
                Call.run_id == row["run_id"],
                Call.item_id == row["item_id"],
                Call.execution == row["execution"],
                Call.call_index == row["call_index"],
            )
        ).one()
        values = stored_call(row, session=session)
        session.add(ReplacedCall(call_id=stored, reason="duplicate", values=values))
    session.flush()


def replace_calls(rows: Mapping[int, Mapping[str, Any]], *, session: Session) -> None:
    """Give stored calls a new answer (``{call id: column values}``); each previous answer is
    kept whole as a ``retried`` :class:`ReplacedCall`."""
    now = utc_now()
    for call_id, values in rows.items():
        old = session.get_one(Call, call_id)
        session.add(
            ReplacedCall(call_id=call_id, reason="retried", values=old.model_dump(mode="json"))
        )
        old.sqlmodel_update({**stored_call(values, session=session), "created_at": now})
        session.add(old)
    session.flush()


def add_provider_batch(
    run_id: int, token: str, custom_ids: list[str], *, session: Session
) -> ProviderBatch:
    """Record a batch submission (state ``submitting``) before the provider is asked."""
    return saved(ProviderBatch(run_id=run_id, token=token, custom_ids=custom_ids), session=session)


def update_provider_batch(batch: ProviderBatch, *, session: Session, **values: Any) -> None:
    """Set fields of a batch record (``state``, ``file_id``, ``batch_id``...); one coming to
    ``collected`` queues ``batch.collected`` for the webhooks."""
    before = batch.state
    batch.sqlmodel_update(values)
    saved(batch, session=session)
    if batch.state == "collected" != before and (run := session.get(Run, batch.run_id)):
        run_event(run, "batch.collected", session=session)


def run_batches(run_id: int, *, session: Session) -> list[ProviderBatch]:
    """The run's batch submissions, oldest first."""
    query = select(ProviderBatch).where(ProviderBatch.run_id == run_id)
    return list(session.exec(query.order_by(col(ProviderBatch.id))).all())


def claimed_batch_ids(*, session: Session) -> set[str]:
    """Provider batch ids recorded by any run."""
    query = select(ProviderBatch.batch_id).where(col(ProviderBatch.batch_id).is_not(None))
    return {batch_id for batch_id in session.exec(query).all() if batch_id}


def pending_batch_keys(*, session: Session) -> set[str]:
    """Content keys sent in batches of any run whose results are not stored yet."""
    carrying = col(ProviderBatch.state).in_(("submitting", "submitted"))
    query = select(ProviderBatch.custom_ids).where(carrying)
    return {key for keys in session.exec(query).all() for key in keys}


def run_calls_by_slot(
    run_id: int, *, session: Session, item_ids: Iterable[int]
) -> dict[tuple[int, int, int], Call]:
    """``{(item db id, execution, call index): call}`` of the run's calls of these items."""
    query = select(Call).where(Call.run_id == run_id, col(Call.item_id).in_(list(item_ids)))
    return {(c.item_id, c.execution, c.call_index): c for c in session.exec(query).all()}


def _at_positions(query: Any, run_id: int, start: int | None, stop: int | None) -> Any:
    """``query`` (of the run's calls joined with :class:`ItemRow`) kept to the items at
    positions ``start`` to ``stop`` (excluded; None: open). The dataset is named so that the
    database finds the items by its position index, not by going through every call."""
    if start is None and stop is None:
        return query
    dataset = select(Run.dataset_id).where(Run.id == run_id).scalar_subquery()
    query = query.where(col(ItemRow.dataset_id) == dataset)
    if start is not None:
        query = query.where(col(ItemRow.position) >= start)
    if stop is not None:
        query = query.where(col(ItemRow.position) < stop)
    return query


def run_calls(
    run_id: int, *, session: Session, start: int | None = None, stop: int | None = None
) -> list[Call]:
    """The run's calls by item, execution and call index (items at ``start``:``stop`` only)."""
    query = select(Call).where(Call.run_id == run_id)
    if start is not None or stop is not None:
        joined = query.join(ItemRow, col(ItemRow.id) == Call.item_id)
        query = _at_positions(joined, run_id, start, stop)
    return list(
        session.exec(
            query.order_by(col(Call.item_id), col(Call.execution), col(Call.call_index))
        ).all()
    )


def item_calls(run_id: int, item_db_id: int, *, session: Session) -> list[Call]:
    """The run's calls of one item, by execution and call index."""
    by_slot = run_calls_by_slot(run_id, session=session, item_ids=[item_db_id])
    return [by_slot[slot] for slot in sorted(by_slot)]


def stored_judgment(
    item_key: str,
    execution: int,
    call_index: int,
    ok: bool,
    error: str | None,
    order: list[str],
    parsed: dict[str, Any] | None,
    repaired: list[str],
) -> Judgment:
    """A stored call as a judgment; a failed one keeps only its order and error."""
    slot = (item_key, execution, call_index, tuple(order))
    if not ok or parsed is None:
        return Judgment(*slot, False, error or "failed")
    found = (parsed.get("factuality", {}), parsed.get("hallucination_risk", {}))
    ranking = tuple(parsed.get("ranking", ()))
    return Judgment(*slot, True, None, *found, ranking, parsed.get("confidence"), tuple(repaired))


def call_judgments(item_key: str, calls: Iterable[Call]) -> list[Judgment]:
    """Stored calls of one item as judgments (:func:`stored_judgment`)."""
    return [
        stored_judgment(
            item_key, c.execution, c.call_index, c.ok, c.error, c.order, c.judgment, c.repaired
        )
        for c in calls
    ]


def run_judgments(
    run_id: int, *, session: Session, start: int | None = None, stop: int | None = None
) -> list[Judgment]:
    """Every call of the run (of the items at positions ``start`` to ``stop`` only, when
    given) as a judgment, by item position, execution and call index; ``item_id`` is the item's
    key. For speed the JSON columns are read as text and decoded by one ``json.loads``."""
    query = (
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            ItemRow.item_key,
            Call.execution,
            Call.call_index,
            Call.ok,
            Call.error,
            cast(Call.order, Text),
            cast(Call.judgment, Text),
            cast(Call.repaired, Text),
        )
        .join(ItemRow, col(ItemRow.id) == Call.item_id)
        .where(Call.run_id == run_id)
        .order_by(col(ItemRow.position), col(Call.execution), col(Call.call_index))
    )
    query = _at_positions(query, run_id, start, stop)
    with gc_paused():
        rows = session.exec(query).all()
        json_columns = ",".join(
            f"[{order},{parsed or 'null'},{repaired}]" for *_, order, parsed, repaired in rows
        )
        decoded = json.loads(f"[{json_columns}]")
        return [
            stored_judgment(*row[:5], *json_values)
            for row, json_values in zip(rows, decoded, strict=True)
        ]
