"""Query functions: plain functions taking the session as a keyword argument.

They flush but never commit: the caller's :func:`~pcf.store.engine.session_scope` decides, so
that an import or a run step that fails leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import socket
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import (
    CursorResult,
    Result,
    Text,
    and_,
    bindparam,
    case,
    cast,
    delete,
    distinct,
    event,
    func,
    insert,
    literal,
    or_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session, col, select

from pcf.items import RESERVED_CANDIDATE_IDS, Candidate, Item
from pcf.judgments import Judgment
from pcf.processes import gc_paused, process_exists
from pcf.store.engine import LostRaceError
from pcf.store.models import (
    Adjudication,
    AuditEvent,
    Call,
    CandidateRow,
    Dataset,
    ItemRow,
    KeyClaim,
    LabellingPlan,
    Member,
    ProviderBatch,
    ReplacedCall,
    RequestTemplate,
    Reservation,
    Resolution,
    Run,
    RunLease,
    RunResult,
    RunStatus,
    utc_now,
)
from pcf.store.requests import rebuilt_request, stored_request

LABEL_COLUMNS = (
    "item_key",
    "item_db_id",
    "annotator",
    "choice",
    "confidence",
    "tags",
    "notes",
    "created_at",
    "adjudication_id",
)
SECRET_SETTING_WORDS = ("api_key", "apikey", "secret", "password", "authorization")
CACHE_QUERY_CHUNK = 500
"""Content keys per query of :func:`cached_calls` (SQLite allows 32766 parameters)."""


# ---------------------------------------------------------------- datasets and items


def rows_changed(result: Result[Any]) -> int:
    """The rows an UPDATE or DELETE changed (its result is a cursor's)."""
    assert isinstance(result, CursorResult)
    return result.rowcount


def import_items(
    items: list[Item],
    *,
    session: Session,
    name: str,
    fmt: str,
    source_path: str | Path | None = None,
    seed: int = 0,
) -> Dataset:
    """Store a dataset and its items and candidates with bulk inserts, in the caller's transaction.

    Args:
        items: the items, in file order.
        session: the open session; flushed, not committed.
        name: a name no other dataset has.
        fmt: the format the items were loaded from (``jsonl``, ``rewardbench2``...).
        source_path: the file they came from.
        seed: the dataset seed of the canonical orders.

    Raises:
        ValueError: the name is taken, there are no items, or two items share an id or an item
            lists one candidate id twice.
    """
    if not items:
        raise ValueError(f"no items to import into dataset {name!r}")
    if get_dataset(name, session=session) is not None:
        raise ValueError(f"a dataset named {name!r} already exists; choose another name")
    dataset = Dataset(
        name=name,
        format=fmt,
        source_path=None if source_path is None else str(source_path),
        seed=seed,
        n_items=len(items),
    )
    session.add(dataset)
    session.flush()
    try:
        for start in range(0, len(items), ITEM_CHUNK):
            _insert_items(dataset.id, start, items[start : start + ITEM_CHUNK], session=session)
    except IntegrityError as exc:
        raise ValueError(
            f"cannot import dataset {name!r}: item ids must be unique, and candidate ids unique "
            f"within each item ({exc.orig})"
        ) from exc
    return dataset


def _insert_items(dataset_id: int, start: int, items: list[Item], *, session: Session) -> None:
    """Insert ``items``, the dataset's items from position ``start`` on, and their candidates
    (a chunk at a time: the rows of a whole large dataset at once would take gigabytes)."""
    session.execute(
        insert(ItemRow),
        [
            {
                "dataset_id": dataset_id,
                "item_key": item.item_id,
                "position": start + offset,
                "prompt": item.prompt,
                "gold": item.gold,
                "bucket": item.bucket,
                "item_metadata": item.metadata,
            }
            for offset, item in enumerate(items)
        ],
    )
    db_ids = dict(
        session.exec(
            select(ItemRow.item_key, ItemRow.id).where(
                ItemRow.dataset_id == dataset_id,
                col(ItemRow.position) >= start,
                col(ItemRow.position) < start + len(items),
            )
        ).all()
    )
    session.execute(
        insert(CandidateRow),
        [
            {
                "item_id": db_ids[item.item_id],
                "candidate_key": candidate.id,
                "position": position,
                "text": candidate.text,
            }
            for item in items
            for position, candidate in enumerate(item.candidates)
        ],
    )


def get_dataset(name: str, *, session: Session) -> Dataset | None:
    """The dataset called ``name``, or None."""
    return session.exec(select(Dataset).where(Dataset.name == name)).first()


def list_datasets(*, session: Session) -> list[Dataset]:
    """Every dataset, oldest first."""
    return list(session.exec(select(Dataset).order_by(col(Dataset.id))).all())


ITEM_CHUNK = 500
"""Items read at once when a whole dataset is gone through (:class:`DatasetItems`)."""


def _items_where(condition: Any, *, session: Session, texts: bool = True) -> list[Item]:
    """The items matching ``condition`` (on :class:`ItemRow`) in file order, candidates in
    listing order; each item's metadata also holds its database id as ``"db_id"``. Without
    ``texts`` the candidates' texts are not read (left empty)."""
    candidates: dict[int, list[Candidate]] = defaultdict(list)
    text = CandidateRow.text if texts else literal("")
    candidate_rows = session.exec(
        select(CandidateRow.item_id, CandidateRow.candidate_key, text)
        .join(ItemRow, col(ItemRow.id) == CandidateRow.item_id)
        .where(condition)
        .order_by(col(CandidateRow.item_id), col(CandidateRow.position))
    )
    for item_id, key, text in candidate_rows:
        candidates[item_id].append(Candidate(key, text))
    item_rows = session.exec(
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            ItemRow.id,
            ItemRow.item_key,
            ItemRow.prompt,
            ItemRow.gold,
            ItemRow.bucket,
            ItemRow.item_metadata,
        )
        .where(condition)
        .order_by(col(ItemRow.position))
    )
    return [
        Item(key, prompt, tuple(candidates[db_id]), gold, bucket, {**metadata, "db_id": db_id})
        for db_id, key, prompt, gold, bucket, metadata in item_rows
    ]


def load_items(dataset_id: int, *, session: Session) -> list[Item]:
    """The dataset's items in file order, candidates in listing order.

    Each item's metadata also holds its database id as ``"db_id"``.
    """
    return _items_where(ItemRow.dataset_id == dataset_id, session=session)


def items_at(
    dataset_id: int, start: int, stop: int, *, session: Session, texts: bool = True
) -> list[Item]:
    """The dataset's items at positions ``start`` (included) to ``stop`` (excluded), in file
    order, for reading a large dataset a chunk at a time.

    Each item's metadata also holds its database id as ``"db_id"``. Without ``texts`` the
    candidates' texts are left empty (what decisions need is their ids).
    """
    condition = and_(
        col(ItemRow.dataset_id) == dataset_id,
        col(ItemRow.position) >= start,
        col(ItemRow.position) < stop,
    )
    return _items_where(condition, session=session, texts=texts)


def items_named(
    dataset_id: int, item_keys: Iterable[str], *, session: Session, texts: bool = True
) -> list[Item]:
    """The dataset's items with these keys (for the few items a page shows), by database id:
    file order, as :func:`import_items` stores them. Without ``texts`` the candidates' texts
    are left empty."""
    found: list[Item] = []
    for keys in _chunks(item_keys):
        condition = and_(col(ItemRow.dataset_id) == dataset_id, col(ItemRow.item_key).in_(keys))
        found += _items_where(condition, session=session, texts=texts)
    return sorted(found, key=lambda item: item.metadata["db_id"])


class DatasetItems:
    """A dataset's items in file order (its first ``limit`` only), read from the database
    :data:`ITEM_CHUNK` at a time whenever they are gone through, so that work over a dataset
    of any size holds one chunk of items in memory. Each item's metadata holds its database
    id as ``"db_id"``, as with :func:`load_items`."""

    def __init__(self, dataset_id: int, *, session: Session, limit: int | None = None) -> None:
        self.dataset_id, self.session, self.limit = dataset_id, session, limit

    def __iter__(self) -> Iterator[Item]:
        for chunk in self.chunks():
            yield from chunk

    def chunks(self) -> Iterator[list[Item]]:
        """The items, :data:`ITEM_CHUNK` at a time."""
        size = self.session.exec(
            select(func.count()).where(ItemRow.dataset_id == self.dataset_id)
        ).one()
        end = size if self.limit is None else min(size, self.limit)
        for start in range(0, end, ITEM_CHUNK):
            stop = min(start + ITEM_CHUNK, end)
            yield items_at(self.dataset_id, start, stop, session=self.session)


def items_by_ids(item_db_ids: Iterable[int], *, session: Session) -> list[Item]:
    """The items with these database ids (at most :data:`ITEM_CHUNK` of them), in file order;
    each item's metadata holds its database id as ``"db_id"``."""
    return _items_where(col(ItemRow.id).in_(list(item_db_ids)), session=session)


def load_item(item_db_id: int, *, session: Session) -> Item | None:
    """One item by database id (``metadata["db_id"]`` set), or None."""
    found = _items_where(ItemRow.id == item_db_id, session=session)
    return found[0] if found else None


def item_positions(dataset_id: int, *, session: Session) -> list[tuple[str, int, int]]:
    """``(item key, database id, position)`` of the dataset's items, in file order."""
    rows = session.exec(
        select(ItemRow.item_key, ItemRow.id, ItemRow.position)
        .where(ItemRow.dataset_id == dataset_id)
        .order_by(col(ItemRow.position))
    ).all()
    return [(key, db_id, position) for key, db_id, position in rows]


def matching_item_keys(dataset_id: int, text: str, *, session: Session) -> set[str]:
    """Keys of the items whose id, prompt or any candidate contains ``text`` (any case)."""
    rows = session.exec(
        select(ItemRow.item_key)
        .join(CandidateRow, col(CandidateRow.item_id) == ItemRow.id)
        .where(
            ItemRow.dataset_id == dataset_id,
            or_(
                col(ItemRow.item_key).icontains(text, autoescape=True),
                col(ItemRow.prompt).icontains(text, autoescape=True),
                col(CandidateRow.text).icontains(text, autoescape=True),
            ),
        )
        .distinct()
    )
    return set(rows.all())


def item_db_ids(dataset_id: int, *, session: Session) -> dict[str, int]:
    """``{item_key: database id}`` for the dataset's items."""
    rows = session.exec(
        select(ItemRow.item_key, ItemRow.id).where(ItemRow.dataset_id == dataset_id)
    )
    return dict(rows.all())


# ---------------------------------------------------------------- runs and calls


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
    settings: Mapping[str, Any] | None = None,
    base_url: str | None = None,
) -> Run:
    """Record a new pending run.

    Args:
        name: a name no other run has.
        session: the open session; flushed, not committed.
        dataset_id: the dataset judged.
        protocol: one of :data:`pcf.runs.spec.PROTOCOLS`.
        backend: the judge backend (``simulated``, ``openai``...).
        model: the judge model.
        k: orderings per item.
        schedule: the ordering schedule.
        seed: the run seed.
        executions: independent passes over the dataset.
        weights: the consensus weights.
        settings: temperature, max_tokens, slot keys, prices...; never API keys.
        base_url: the server of an OpenAI-compatible backend.

    Raises:
        ValueError: the name is taken, the dataset does not exist, an argument is out of range,
            or ``settings`` holds what looks like a credential.
    """
    if k < 1 or executions < 1:
        raise ValueError(f"k and executions must be at least 1, got k={k}, executions={executions}")
    if (secret := _secret_setting(settings or {})) is not None:
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
        settings=dict(settings or {}),
    )
    session.add(run)
    session.flush()
    return run


def get_run(name: str, *, session: Session) -> Run | None:
    """The run called ``name``, or None."""
    return session.exec(select(Run).where(Run.name == name)).first()


def get_dataset_by_id(dataset_id: int, *, session: Session) -> Dataset | None:
    """The dataset with database id ``dataset_id``, or None."""
    return session.get(Dataset, dataset_id)


def run_dataset(run: Run, *, session: Session) -> Dataset:
    """The dataset ``run`` judges (every run has one: a foreign key)."""
    dataset = session.get(Dataset, run.dataset_id)
    if dataset is None:
        raise LookupError(f"run {run.name!r} has no dataset")
    return dataset


def set_run_status(run: Run, status: RunStatus | str, *, session: Session) -> Run:
    """Record the run's status (one of :class:`RunStatus`); ``finished`` also stamps
    ``finished_at``."""
    run.status = RunStatus(status).value
    if run.status == RunStatus.FINISHED:
        run.finished_at = utc_now()
    session.add(run)
    session.flush()
    return run


def set_run_setting(run: Run, key: str, value: Any, *, session: Session) -> Run:
    """Store one of a run's settings (never a secret: see :func:`create_run`)."""
    run.settings = {**run.settings, key: value}
    session.add(run)
    session.flush()
    return run


def list_runs(*, session: Session, dataset_id: int | None = None) -> list[Run]:
    """Every run, oldest first; only the runs of ``dataset_id`` when given."""
    query = select(Run).order_by(col(Run.id))
    if dataset_id is not None:
        query = query.where(Run.dataset_id == dataset_id)
    return list(session.exec(query).all())


def run_version(run: Run, *, session: Session) -> tuple[str, int, int, int]:
    """A key that changes whenever the run's calls change: status, call count, newest call id,
    and the newest replaced answer (a retried failed call keeps its id and count, but its old
    answer becomes a :class:`ReplacedCall`)."""
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
    """The revision a result of the run is kept for: its :func:`run_version` and, with
    ``labels``, its dataset's :func:`label_revision`, as text."""
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
    """Keep ``data`` as the run's result ``name`` computed at ``revision``, in place of the one
    stored before. When another process stores the same result at once, its row stays."""
    try:
        with session.begin_nested():
            session.execute(
                delete(RunResult).where(
                    col(RunResult.run_id) == run_id, col(RunResult.name) == name
                )
            )
            session.execute(
                insert(RunResult).values(
                    run_id=run_id, name=name, revision=revision, computed_at=utc_now(), data=data
                )
            )
    except IntegrityError:
        pass  # the other writer's result, computed from the same calls, is kept


def update_run_totals(run_id: int, *, session: Session) -> Run:
    """Recompute a run's totals from its calls and store them on the run.

    ``calls_made`` counts requests sent to the judge (the attempts of every call the cache did
    not answer), ``cache_hits`` the calls the cache answered, ``failures`` the calls left
    failed; tokens and cost add up the calls the cache did not answer.
    """
    run = session.get(Run, run_id)
    if run is None:
        raise ValueError(f"no run with id {run_id}")
    paid = col(Call.cached_from).is_(None)

    def paid_sum(column: Any) -> Any:
        return func.coalesce(func.sum(case((paid, column), else_=0)), 0)

    calls_made, cache_hits, failures, input_tokens, output_tokens, cost = session.exec(
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            paid_sum(Call.attempts),
            func.coalesce(func.sum(case((paid, 0), else_=1)), 0),
            func.coalesce(func.sum(case((col(Call.ok), 0), else_=1)), 0),
            paid_sum(Call.input_tokens),
            paid_sum(Call.output_tokens),
            paid_sum(Call.cost_usd),
        ).where(Call.run_id == run_id)
    ).one()
    run.sqlmodel_update(
        {
            "calls_made": calls_made,
            "cache_hits": cache_hits,
            "failures": failures,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_usd": float(cost),
        }
    )
    session.add(run)
    session.flush()
    return run


# ---------------------------------------------------------------- run leases and deletion

ACTIVE_RUN_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING)


def lease_is_live(lease: RunLease | KeyClaim, now: datetime | None = None) -> bool:
    """Whether the lease's (or claim's) holder may still be working: its time has not run out
    and, when it was taken on this host, its process still exists."""
    if lease.expires_at <= (now or utc_now()):
        return False
    return lease.host != socket.gethostname() or process_exists(lease.pid)


def _lease(run_name: str, *, session: Session) -> RunLease | None:
    """The run's lease as stored now (not as this session last saw it)."""
    return session.exec(
        select(RunLease)
        .where(RunLease.run_name == run_name)
        .execution_options(populate_existing=True)
    ).first()


def take_run_lease(
    run_name: str, *, session: Session, holder: str, ttl_s: float
) -> RunLease | None:
    """Take the lease of ``run_name`` for ``holder``, unless a live holder has it.

    A dead lease (:func:`lease_is_live`) is taken over. The caller commits.

    Returns:
        None when ``holder`` now holds the lease, else the live lease of another holder.

    Raises:
        LostRaceError: another process took or renewed the lease at the same time.
    """
    now = utc_now()
    mine = {
        "holder": holder,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "acquired_at": now,
        "expires_at": now + timedelta(seconds=ttl_s),
    }
    current = _lease(run_name, session=session)
    if current is None:
        try:
            session.execute(insert(RunLease), [{"run_name": run_name, **mine}])
        except IntegrityError as exc:
            raise LostRaceError(f"run {run_name!r} was taken at the same time") from exc
        return None
    if current.holder != holder and lease_is_live(current, now):
        return current
    taken = session.execute(
        update(RunLease)
        .where(col(RunLease.run_name) == run_name, col(RunLease.holder) == current.holder)
        .values(**mine)
        .execution_options(synchronize_session=False)
    )
    if rows_changed(taken) != 1:
        raise LostRaceError(f"run {run_name!r} was taken at the same time")
    return None


def renew_run_lease(run_name: str, *, session: Session, holder: str, ttl_s: float) -> bool:
    """Push the lease's expiry ``ttl_s`` seconds ahead; False when ``holder`` lost it."""
    renewed = session.execute(
        update(RunLease)
        .where(col(RunLease.run_name) == run_name, col(RunLease.holder) == holder)
        .values(expires_at=utc_now() + timedelta(seconds=ttl_s))
        .execution_options(synchronize_session=False)
    )
    return rows_changed(renewed) == 1


def release_run_lease(run_name: str, *, session: Session, holder: str) -> None:
    """Give the lease up (nothing happens when ``holder`` no longer holds it)."""
    session.execute(
        delete(RunLease).where(col(RunLease.run_name) == run_name, col(RunLease.holder) == holder)
    )


def claim_keys(
    content_keys: Iterable[str], *, session: Session, holder: str, ttl_s: float
) -> set[str]:
    """Claim requests about to be sent for ``holder``, except those a live other holder
    claims (:class:`~pcf.store.models.KeyClaim`); dead claims are taken over. The caller
    commits.

    Returns:
        The keys ``holder`` holds now.
    """
    now = utc_now()
    mine = {
        "holder": holder,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "expires_at": now + timedelta(seconds=ttl_s),
    }
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    held: set[str] = set()
    for chunk in _chunks(content_keys):
        values = [{"content_key": key, **mine} for key in chunk]
        session.execute(dialect.insert(KeyClaim).values(values).on_conflict_do_nothing())
        claims = session.exec(
            select(KeyClaim)
            .where(col(KeyClaim.content_key).in_(chunk))
            .execution_options(populate_existing=True)
        ).all()
        for claim in claims:
            if claim.holder != holder and not lease_is_live(claim, now):
                taken = session.execute(
                    update(KeyClaim)
                    .where(
                        col(KeyClaim.content_key) == claim.content_key,
                        col(KeyClaim.holder) == claim.holder,
                    )
                    .values(**mine)
                    .execution_options(synchronize_session=False)
                )
                if rows_changed(taken) != 1:
                    continue
            elif claim.holder != holder:
                continue
            held.add(claim.content_key)
    return held


def live_claims(content_keys: Iterable[str], *, session: Session) -> set[str]:
    """The content keys among ``content_keys`` that a live holder claims now."""
    now, found = utc_now(), set()
    for chunk in _chunks(content_keys):
        claims = session.exec(
            select(KeyClaim)
            .where(col(KeyClaim.content_key).in_(chunk))
            .execution_options(populate_existing=True)
        )
        found |= {claim.content_key for claim in claims if lease_is_live(claim, now)}
    return found


_RELEASE_KEY = delete(KeyClaim).where(
    col(KeyClaim.content_key) == bindparam("key"), col(KeyClaim.holder) == bindparam("holder")
)


def release_keys(content_keys: Iterable[str] | None, *, session: Session, holder: str) -> None:
    """Give up ``holder``'s claims on ``content_keys`` (all of them when None)."""
    if content_keys is None:
        session.execute(delete(KeyClaim).where(col(KeyClaim.holder) == holder))
        return
    # One key per statement, found by the primary key; a statement built once, run on the
    # connection: this runs once per answer.
    for key in dict.fromkeys(content_keys):
        session.connection().execute(_RELEASE_KEY, {"key": key, "holder": holder})


def renew_key_claims(holder: str, *, session: Session, ttl_s: float) -> None:
    """Push the expiry of ``holder``'s claims ``ttl_s`` seconds ahead."""
    session.execute(
        update(KeyClaim)
        .where(col(KeyClaim.holder) == holder)
        .values(expires_at=utc_now() + timedelta(seconds=ttl_s))
        .execution_options(synchronize_session=False)
    )


def usage_peaks(run_id: int, *, session: Session) -> tuple[int, int]:
    """The most input and output tokens one stored call of the run was billed for."""
    peaks = session.exec(
        select(func.max(Call.input_tokens), func.max(Call.output_tokens)).where(
            Call.run_id == run_id
        )
    ).one()
    return peaks[0] or 0, peaks[1] or 0


def run_states(runs: Iterable[Run], *, session: Session) -> dict[int, str]:
    """``{run id: status to show}``: the stored status, except that a pending or running run
    with no live lease (:func:`lease_is_live`) is ``interrupted``: its process stopped early
    (killed, crashed), and judging it again resumes it."""
    fresh = select(RunLease).execution_options(populate_existing=True)
    leases = {lease.run_name: lease for lease in session.exec(fresh).all()}
    now = utc_now()
    states = {}
    for run in runs:
        lease = leases.get(run.name)
        stale = run.status in ACTIVE_RUN_STATUSES and (
            lease is None or not lease_is_live(lease, now)
        )
        states[run.id] = "interrupted" if stale else run.status
    return states


def run_listing(*, session: Session, dataset_id: int | None = None) -> list[dict[str, Any]]:
    """The runs (of one dataset, or all), oldest first, as listed by ``pcf runs`` and the Runs
    page: name, dataset, settings, status to show (:func:`run_states`), calls, tokens, cost."""
    runs = list_runs(session=session, dataset_id=dataset_id)
    names = {d.id: d.name for d in list_datasets(session=session)}
    states = run_states(runs, session=session)
    return [
        {
            "name": r.name,
            "dataset": names.get(r.dataset_id),
            "protocol": r.protocol,
            "backend": r.backend,
            "model": r.model,
            "k": r.k,
            "schedule": r.schedule,
            "executions": r.executions,
            "status": states[r.id],
            "calls": r.calls_made,
            "cache_hits": r.cache_hits,
            "failures": r.failures,
            "input_tokens": r.input_tokens,
            "output_tokens": r.output_tokens,
            "cost_usd": r.cost_usd,
        }
        for r in runs
    ]


def delete_run(name: str, *, session: Session) -> dict[str, int]:
    """Delete the run ``name``, its calls and their replaced answers, and its stored results;
    never any adjudication (labels belong to items, not runs).

    Returns:
        ``{"calls": n, "replaced_calls": m}``: the rows deleted with the run.

    Raises:
        ValueError: no such run, a live process is judging it, or other runs reuse its answers
            from the cache (delete those first).
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
    session.execute(delete(ProviderBatch).where(col(ProviderBatch.run_id) == run.id))
    session.execute(delete(RunResult).where(col(RunResult.run_id) == run.id))
    session.delete(run)
    session.flush()
    return {"calls": rows_changed(deleted), "replaced_calls": rows_changed(replaced)}


def _chunks(keys: Iterable[str]) -> Iterator[list[str]]:
    """Distinct keys in chunks of :data:`CACHE_QUERY_CHUNK`, for ``IN`` queries of any size."""
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), CACHE_QUERY_CHUNK):
        yield unique[start : start + CACHE_QUERY_CHUNK]


def cached_calls(content_keys: Iterable[str], *, session: Session) -> dict[str, Call]:
    """The answers to reuse: ``{content_key: the newest ok call with that key, in any run}``.

    Keys no ok call answered are left out. Queried in chunks, so any number of keys works.
    """
    found: dict[str, Call] = {}
    for chunk in _chunks(content_keys):
        rows = session.exec(
            select(Call)
            .where(col(Call.content_key).in_(chunk), col(Call.ok))
            .order_by(col(Call.created_at).desc(), col(Call.id).desc())
        )
        for call in rows:
            found.setdefault(call.content_key, call)
    return found


def answered_keys(content_keys: Iterable[str], *, session: Session) -> set[str]:
    """The content keys among ``content_keys`` that an ok call answered (the cache's hits)."""
    found: set[str] = set()
    for chunk in _chunks(content_keys):
        found |= set(
            session.exec(
                select(Call.content_key).where(col(Call.content_key).in_(chunk), col(Call.ok))
            ).all()
        )
    return found


TEMPLATE_IDS = "pcf.request_template_ids"
"""``session.info`` key: ``{template digest: id}`` of the templates committed, seen by it."""
NEW_TEMPLATE_IDS = "pcf.new_request_template_ids"
"""``session.info`` key: the same for the templates seen in its open transaction."""


@event.listens_for(OrmSession, "after_commit")
def _keep_template_ids(session: OrmSession) -> None:
    """The templates a transaction saw exist for good once it commits."""
    session.info.setdefault(TEMPLATE_IDS, {}).update(session.info.pop(NEW_TEMPLATE_IDS, {}))


@event.listens_for(OrmSession, "after_transaction_end")
def _forget_new_template_ids(session: OrmSession, _transaction: Any) -> None:
    """A transaction that ends without a commit may have taken its new templates with it."""
    session.info.pop(NEW_TEMPLATE_IDS, None)


def request_template_id(values: Mapping[str, Any], *, session: Session) -> int:
    """The id of the template with these column values (see
    :func:`~pcf.store.requests.stored_request`), stored first if no row has its digest.

    ``INSERT ... ON CONFLICT DO NOTHING`` then a select, so that two writers storing the same
    template at once both get the one row (on PostgreSQL the second insert waits for the
    first transaction). Ids are remembered per session, once committed.
    """
    digest = values["digest"]
    for known in (TEMPLATE_IDS, NEW_TEMPLATE_IDS):
        if (found := session.info.get(known, {}).get(digest)) is not None:
            return found
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(dialect.insert(RequestTemplate).values(**values).on_conflict_do_nothing())
    found = session.exec(select(RequestTemplate.id).where(RequestTemplate.digest == digest)).one()
    session.info.setdefault(NEW_TEMPLATE_IDS, {})[digest] = found
    return found


def stored_call(row: Mapping[str, Any], *, session: Session) -> dict[str, Any]:
    """A call's column values as the table stores them: a ``request`` among them (with the
    ``request_texts`` it was made from, if given) becomes ``template_id`` and
    ``request_digest``.

    ``request_texts`` is the item's prompt and the candidate texts in slot order: where they
    occur in the user message, the template refers to them instead of holding them.
    """
    values = dict(row)
    if "request" not in values:
        return values
    template, digest = stored_request(values.pop("request"), values.pop("request_texts", None))
    values["template_id"] = request_template_id(template, session=session)
    values["request_digest"] = digest
    return values


def insert_calls(rows: Iterable[Mapping[str, Any]], *, session: Session) -> None:
    """Store calls given as column values with their ``request`` (see :func:`stored_call`),
    stamped with the current time.

    A plain INSERT of the rows, without building ORM objects or a unit of work: the run engine
    stores every judge answer this way as it arrives, in the event loop, and every millisecond
    it takes is taken from the judge's SDK (see ``benchmarks/runner_throughput.py``).
    """
    now = utc_now()
    values = [{"created_at": now, **stored_call(row, session=session)} for row in rows]
    session.execute(insert(Call), values)


def call_request(call: Call, *, session: Session) -> dict[str, Any]:
    """The request ``call`` sent, as the judge got it: ``backend``, ``model``, ``system``,
    ``user``, ``schema``, ``temperature``, ``max_tokens``.

    Rebuilt from its template and the item's prompt and candidate texts;
    ``call.sent(request)`` checks it against the digest stored when it was sent.
    """
    template = session.get(RequestTemplate, call.template_id)
    if template is None:
        raise LookupError(f"call {call.id} has no request template")
    prompt = session.exec(select(ItemRow.prompt).where(ItemRow.id == call.item_id)).one()
    texts = dict(
        session.exec(
            select(CandidateRow.candidate_key, CandidateRow.text).where(
                CandidateRow.item_id == call.item_id
            )
        ).all()
    )
    return rebuilt_request(template, prompt, [texts[key] for key in call.order])


def keep_duplicate_answers(rows: Iterable[Mapping[str, Any]], *, session: Session) -> None:
    """Keep answers for calls the run already stored (a second writer's) as ``duplicate``
    replaced calls of the stored call, so that no paid answer is ever lost."""
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
    """Give stored calls a new current answer: ``{call id: column values}`` with the
    ``request`` (see :func:`stored_call`).

    Each call's previous values are kept whole as a ``retried`` :class:`ReplacedCall` first.
    """
    now = utc_now()
    for call_id, values in rows.items():
        old = session.get(Call, call_id)
        if old is None:
            raise ValueError(f"no call with id {call_id}")
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
    batch = ProviderBatch(run_id=run_id, token=token, custom_ids=custom_ids)
    session.add(batch)
    session.flush()
    return batch


def update_provider_batch(batch: ProviderBatch, *, session: Session, **values: Any) -> None:
    """Set fields of a batch record (``state``, ``file_id``, ``batch_id``...)."""
    batch.sqlmodel_update(values)
    session.add(batch)
    session.flush()


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
    run_id: int, *, session: Session, item_ids: Iterable[int] | None = None
) -> dict[tuple[int, int, int], Call]:
    """The run's stored calls (of the items with these database ids only, when given) by
    ``(item database id, execution, call index)``."""
    query = select(Call).where(Call.run_id == run_id)
    if item_ids is not None:
        query = query.where(col(Call.item_id).in_(list(item_ids)))
    return {(c.item_id, c.execution, c.call_index): c for c in session.exec(query).all()}


def _at_positions(query: Any, run_id: int, start: int | None, stop: int | None) -> Any:
    """``query`` (of the run's calls, joined with :class:`ItemRow`) kept to the items at
    positions ``start`` to ``stop`` (excluded); None leaves that end open.

    The run's dataset is named too, so that the database finds those items by position (its
    index) and then their calls, instead of going through every call of the run for each
    chunk of items.
    """
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
    """The run's calls, by item, execution and call index; only those of the items at
    positions ``start`` to ``stop`` (excluded) when given."""
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
    return list(
        session.exec(
            select(Call)
            .where(Call.run_id == run_id, Call.item_id == item_db_id)
            .order_by(col(Call.execution), col(Call.call_index))
        ).all()
    )


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
    if not ok or parsed is None:
        return Judgment(item_key, execution, call_index, tuple(order), False, error or "failed")
    return Judgment(
        item_key,
        execution,
        call_index,
        tuple(order),
        True,
        None,
        parsed.get("factuality", {}),
        parsed.get("hallucination_risk", {}),
        tuple(parsed.get("ranking", ())),
        parsed.get("confidence"),
        tuple(repaired),
    )


def run_judgments(
    run_id: int, *, session: Session, start: int | None = None, stop: int | None = None
) -> list[Judgment]:
    """Every call of the run as a judgment (failed calls with ``ok=False`` and their error);
    only the calls of the items at positions ``start`` to ``stop`` (excluded) when given.

    Ordered by item position, execution and call index; ``item_id`` is the item's key. For
    speed the JSON columns are read as text and decoded by a single ``json.loads``.
    """
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


# ---------------------------------------------------------------- adjudications


def add_adjudication(
    item_db_id: int,
    *,
    session: Session,
    annotator: str,
    choice: str,
    confidence: float | None = None,
    tags: Iterable[str] = (),
    notes: str = "",
) -> Adjudication:
    """Record a human label as a new row; it supersedes the annotator's previous label.

    Args:
        item_db_id: the item's database id.
        session: the open session; flushed, not committed.
        annotator: who decided.
        choice: a candidate id of the item, ``none_correct`` or ``cannot_tell``.
        confidence: how sure the annotator is, in [0, 1].
        tags: free labels (``ambiguous``, ``needs-source``...).
        notes: the annotator's reasons.

    Raises:
        ValueError: unknown item, empty annotator, a choice the item does not offer, a
            confidence outside [0, 1], or a NUL character in the annotator, tags or notes
            (PostgreSQL cannot store one; SQLite gets the same rule).
        LostRaceError: the annotator's label for the item was saved by another session at the
            same time; in a new transaction this label supersedes that one (see
            :func:`~pcf.store.engine.write_with_retry`), so the history stays a line.
    """
    keys = session.exec(
        select(CandidateRow.candidate_key).where(CandidateRow.item_id == item_db_id)
    ).all()
    if not keys:
        raise ValueError(f"no item with database id {item_db_id}")
    if not annotator.strip():
        raise ValueError("say who is annotating: the annotator name is empty")
    if choice not in keys and choice not in RESERVED_CANDIDATE_IDS:
        options = ", ".join([*keys, *RESERVED_CANDIDATE_IDS])
        raise ValueError(f"choice {choice!r} is not one of: {options}")
    if confidence is not None and not 0 <= confidence <= 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    tag_list = list(tags)
    for field, text in (("annotator", annotator), ("notes", notes), ("tags", "".join(tag_list))):
        if "\x00" in text:
            raise ValueError(f"the {field} must not hold a NUL character (U+0000); remove it")
    previous = latest_label(item_db_id, annotator, session=session)
    adjudication = Adjudication(
        item_id=item_db_id,
        annotator=annotator,
        choice=choice,
        confidence=confidence,
        tags=tag_list,
        notes=notes,
        supersedes=previous.id if previous is not None else None,
    )
    session.add(adjudication)
    try:
        session.flush()
    except IntegrityError as exc:  # the chain index: another save took this place first
        raise LostRaceError(
            f"another label by {annotator!r} for item {item_db_id} was saved at the same time"
        ) from exc
    return adjudication


def latest_label(item_db_id: int, annotator: str, *, session: Session) -> Adjudication | None:
    """The annotator's current label of the item (their newest row), or None."""
    return session.exec(
        select(Adjudication)
        .where(Adjudication.item_id == item_db_id, Adjudication.annotator == annotator)
        .order_by(col(Adjudication.created_at).desc(), col(Adjudication.id).desc())
        .limit(1)
    ).first()


def adjudication_history(item_db_id: int, *, session: Session) -> list[Adjudication]:
    """Every label ever given to the item, by every annotator, oldest first."""
    return list(
        session.exec(
            select(Adjudication)
            .where(Adjudication.item_id == item_db_id)
            .order_by(col(Adjudication.created_at), col(Adjudication.id))
        ).all()
    )


def current_labels(dataset_id: int, *, session: Session) -> pd.DataFrame:
    """The current label of every (item, annotator) of the dataset: their newest row.

    Returns:
        One row per (item_key, annotator), in item order, with the columns of
        :data:`LABEL_COLUMNS`; ``created_at`` is when the current label was given.
    """
    newest_first = func.row_number().over(
        partition_by=(col(Adjudication.item_id), col(Adjudication.annotator)),
        order_by=(col(Adjudication.created_at).desc(), col(Adjudication.id).desc()),
    )
    ranked = (
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            ItemRow.item_key,
            Adjudication.item_id,
            Adjudication.annotator,
            Adjudication.choice,
            Adjudication.confidence,
            Adjudication.tags,
            Adjudication.notes,
            Adjudication.created_at,
            Adjudication.id,
            ItemRow.position,
            newest_first.label("newness"),
        )
        .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
        .where(ItemRow.dataset_id == dataset_id)
        .subquery()
    )
    rows = session.exec(
        select(*list(ranked.c)[: len(LABEL_COLUMNS)])
        .where(ranked.c.newness == 1)
        .order_by(ranked.c.position, ranked.c.annotator)
    ).all()
    return pd.DataFrame([tuple(row) for row in rows], columns=list(LABEL_COLUMNS))


def adjudicated_item_keys(dataset_id: int, annotator: str, *, session: Session) -> set[str]:
    """Keys of the dataset's items that ``annotator`` has labelled."""
    rows = session.exec(
        select(ItemRow.item_key)
        .join(Adjudication, col(Adjudication.item_id) == ItemRow.id)
        .where(ItemRow.dataset_id == dataset_id, Adjudication.annotator == annotator)
        .distinct()
    )
    return set(rows.all())


def labelled_item_counts(dataset_id: int, *, session: Session) -> dict[str, int]:
    """``{item key: number of annotators who labelled it}`` for the labelled items."""
    rows = session.exec(
        select(ItemRow.item_key, func.count(distinct(col(Adjudication.annotator))))
        .join(Adjudication, col(Adjudication.item_id) == ItemRow.id)
        .where(ItemRow.dataset_id == dataset_id)
        .group_by(ItemRow.item_key)
    )
    return dict(rows.all())


def adjudication_records(dataset_id: int, *, session: Session) -> list[dict[str, Any]]:
    """Every adjudication of the dataset, corrections included, oldest first, for export."""
    rows = session.exec(
        select(Adjudication, ItemRow.item_key)
        .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
        .where(ItemRow.dataset_id == dataset_id)
        .order_by(col(Adjudication.created_at), col(Adjudication.id))
    ).all()
    return [
        {
            "id": adj.id,
            "item_id": item_key,
            "annotator": adj.annotator,
            "created_at": adj.created_at.isoformat(),
            "choice": adj.choice,
            "confidence": adj.confidence,
            "tags": adj.tags,
            "notes": adj.notes,
            "supersedes": adj.supersedes,
        }
        for adj, item_key in rows
    ]


def record_item_stops(
    run: Run, stops: Mapping[str, Mapping[str, Any]], *, session: Session
) -> None:
    """Record where an adaptive run stopped each item and why (``settings["stops"]``)."""
    run.settings = {**run.settings, "stops": {key: dict(stop) for key, stop in stops.items()}}
    session.add(run)
    session.flush()


# ---------------------------------------------------------------- members and the audit log


def get_member(email: str, *, session: Session) -> Member | None:
    """The member signed in as ``email`` (compared without case), or None."""
    return session.exec(select(Member).where(func.lower(Member.email) == email.lower())).first()


def bind_member(email: str, issuer: str, subject: str, *, session: Session) -> bool:
    """Bind the member to the provider account ``issuer``/``subject`` unless they are bound
    already (one statement, so two first sign-ins at once bind one account); whether it did."""
    bound = session.execute(
        update(Member)
        .where(func.lower(Member.email) == email.lower(), col(Member.issuer).is_(None))
        .values(issuer=issuer, subject=subject)
        .execution_options(synchronize_session="fetch")
    )
    session.flush()
    return rows_changed(bound) == 1


def local_member(*, session: Session) -> Member | None:
    """The local person of local mode (no sign-in configured), once they gave their name."""
    return session.exec(select(Member).where(col(Member.local))).first()


def list_members(*, session: Session) -> list[Member]:
    """Every member, by email."""
    return list(session.exec(select(Member).order_by(col(Member.email))).all())


def save_member(
    email: str, role: str, *, session: Session, added_by: str, local: bool = False
) -> Member:
    """Add a member, or give an existing one (same email, any case) another role."""
    member = get_member(email, session=session)
    if member is None:
        member = Member(email=email, role=role, added_by=added_by, local=local)
    else:
        member.role = role
    session.add(member)
    session.flush()
    return member


def delete_member(email: str, *, session: Session) -> bool:
    """Remove a member; whether there was one. Their labels stay (they belong to items)."""
    member = get_member(email, session=session)
    if member is None:
        return False
    session.delete(member)
    session.flush()
    return True


def add_audit_event(
    action: str,
    *,
    session: Session,
    actor: str,
    target: str = "",
    details: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """Record that ``actor`` did ``action`` to ``target`` now; audit rows are never changed."""
    event = AuditEvent(actor=actor, action=action, target=target, details=dict(details or {}))
    session.add(event)
    session.flush()
    return event


def audit_events(*, session: Session, limit: int | None = None) -> list[AuditEvent]:
    """The audit log, newest first (all of it, or the newest ``limit`` events)."""
    query = select(AuditEvent).order_by(col(AuditEvent.at).desc(), col(AuditEvent.id).desc())
    return list(session.exec(query.limit(limit) if limit else query).all())


# ---------------------------------------------------------------- team labelling


def get_plan(dataset_id: int, *, session: Session) -> LabellingPlan | None:
    """The dataset's labelling plan, or None when none was set (one label per item)."""
    return session.get(LabellingPlan, dataset_id)


def save_plan(
    dataset_id: int, *, session: Session, updated_by: str, **fields: Any
) -> LabellingPlan:
    """Set the dataset's labelling plan's ``fields`` (a new plan has defaults for the rest)."""
    plan = session.get(LabellingPlan, dataset_id) or LabellingPlan(
        dataset_id=dataset_id, updated_by=updated_by
    )
    for name, value in fields.items():
        setattr(plan, name, value)
    plan.updated_by, plan.updated_at = updated_by, utc_now()
    session.add(plan)
    session.flush()
    return plan


def labellers_by_item(
    dataset_id: int, *, session: Session, item_db_id: int | None = None
) -> dict[int, set[str]]:
    """``{item db id: annotators who labelled it}`` for the dataset's labelled items (or the
    one item ``item_db_id``)."""
    query = (
        select(Adjudication.item_id, Adjudication.annotator)
        .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
        .where(ItemRow.dataset_id == dataset_id)
        .distinct()
    )
    if item_db_id is not None:
        query = query.where(Adjudication.item_id == item_db_id)
    return _people_by_item(session.exec(query))


def holders_by_item(
    dataset_id: int, *, session: Session, now: datetime, item_db_id: int | None = None
) -> dict[int, set[str]]:
    """``{item db id: annotators holding it}``: the dataset's reservations (or the one item's)
    that have not lapsed at ``now``."""
    query = (
        select(Reservation.item_id, Reservation.annotator)
        .join(ItemRow, col(ItemRow.id) == Reservation.item_id)
        .where(ItemRow.dataset_id == dataset_id, Reservation.expires_at > now)
    )
    if item_db_id is not None:
        query = query.where(Reservation.item_id == item_db_id)
    return _people_by_item(session.exec(query))


def _people_by_item(rows: Iterable[tuple[int, str]]) -> dict[int, set[str]]:
    found: dict[int, set[str]] = defaultdict(set)
    for item_id, annotator in rows:
        found[item_id].add(annotator)
    return dict(found)


def lock_item(item_db_id: int, *, session: Session) -> None:
    """Make the rest of the transaction the only one that claims or labels the item now, so
    that what it reads next (labels, holds) stays true until it commits.

    PostgreSQL locks the item's row (``FOR UPDATE``); SQLite takes its write lock at once
    (``BEGIN IMMEDIATE``: Python's sqlite3 would open the transaction only at the first
    write, after the reads).
    """
    connection = session.connection()
    if connection.dialect.name == "sqlite":
        driver = connection.connection.driver_connection
        assert driver is not None  # a connection checked out of the pool has its driver's
        if not driver.in_transaction:
            driver.execute("BEGIN IMMEDIATE")
        return
    session.exec(select(ItemRow.id).where(ItemRow.id == item_db_id).with_for_update()).first()


def hold_item(item_db_id: int, annotator: str, *, session: Session, until: datetime) -> None:
    """Reserve the item for ``annotator`` until ``until`` (a new hold or a longer one)."""
    held = session.get(Reservation, (item_db_id, annotator))
    if held is None:
        held = Reservation(item_id=item_db_id, annotator=annotator, expires_at=until)
    held.expires_at = until
    session.add(held)
    session.flush()


def release_item(item_db_id: int, annotator: str, *, session: Session) -> None:
    """End ``annotator``'s hold on the item, if any."""
    session.exec(
        delete(Reservation).where(
            col(Reservation.item_id) == item_db_id, col(Reservation.annotator) == annotator
        )
    )
    session.flush()


def add_resolution(
    item_db_id: int, *, session: Session, choice: str, reason: str, resolved_by: str
) -> Resolution:
    """Record a reviewer's gold for the item as a new row (the newest row is its resolution)."""
    resolution = Resolution(
        item_id=item_db_id, choice=choice, reason=reason, resolved_by=resolved_by
    )
    session.add(resolution)
    session.flush()
    return resolution


def resolutions(dataset_id: int, *, session: Session) -> pd.DataFrame:
    """Every resolution of the dataset's items, oldest first: ``item_key``, ``item_db_id``,
    ``choice``, ``reason``, ``resolved_by``, ``created_at``, ``resolution_id``."""
    rows = session.exec(
        select(  # type: ignore[call-overload]  # SQLModel types select() up to 4 columns
            ItemRow.item_key,
            Resolution.item_id,
            Resolution.choice,
            Resolution.reason,
            Resolution.resolved_by,
            Resolution.created_at,
            Resolution.id,
        )
        .join(ItemRow, col(ItemRow.id) == Resolution.item_id)
        .where(ItemRow.dataset_id == dataset_id)
        .order_by(col(Resolution.created_at), col(Resolution.id))
    ).all()
    return pd.DataFrame(
        [tuple(row) for row in rows],
        columns=[
            "item_key",
            "item_db_id",
            "choice",
            "reason",
            "resolved_by",
            "created_at",
            "resolution_id",
        ],
    )


def label_revision(dataset_id: int, *, session: Session) -> tuple[Any, ...]:
    """A value that changes whenever the dataset's human side does: a label saved (a
    correction too), a resolution, a new labelling plan. For page caches of figures that
    depend on labels."""
    newest_label = session.exec(
        select(func.max(Adjudication.id))
        .join(ItemRow, col(ItemRow.id) == Adjudication.item_id)
        .where(ItemRow.dataset_id == dataset_id)
    ).one()
    newest_resolution = session.exec(
        select(func.max(Resolution.id))
        .join(ItemRow, col(ItemRow.id) == Resolution.item_id)
        .where(ItemRow.dataset_id == dataset_id)
    ).one()
    plan = session.get(LabellingPlan, dataset_id)
    return newest_label, newest_resolution, plan.updated_at if plan is not None else None
