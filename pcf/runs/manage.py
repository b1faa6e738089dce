"""Run management: create, resume, judge and delete runs and import datasets, each checked
against the actor's role (:mod:`pcf.access`) and written to the audit log."""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlmodel import Session

from pcf.access import (
    ALLOWED_BASE_URLS_ENV,
    AccessDeniedError,
    Actor,
    Permission,
    authorize,
    key_may_go_to,
)
from pcf.errors import DataError
from pcf.files import FieldChecker
from pcf.items import Item, items_from_rows, load_any
from pcf.judges import KEY_ENV, key_names, make_judge
from pcf.judges.base import env_key
from pcf.judges.replay import ReplayJudge
from pcf.prices import price_table
from pcf.run_settings import Recorded, RunSettings
from pcf.runs.estimate import dataset_of, estimate_run, settings_conflict
from pcf.runs.live import execute
from pcf.runs.rows import Progress, RunReport
from pcf.runs.spec import RunSpec
from pcf.store import (
    Dataset,
    DatasetItems,
    LostRaceError,
    Run,
    RunStatus,
    add_audit_event,
    append_items,
    commit_retrying,
    create_dataset,
    create_run,
    get_dataset,
    get_run,
    import_items,
    items_named,
    release_keys,
    release_run_lease,
    renew_key_claims,
    renew_run_lease,
    run_batches,
    run_spend,
    set_run_status,
    take_run_lease,
)
from pcf.store import delete_run as delete_stored_run

DATASET_NAME_MAX = 200
APP_BACKENDS = ("simulated", "openai", "anthropic", "google", "azure")


MAX_COST_ENV = "PCF_MAX_COST_USD"
"""The operator's cost cap per run in USD, for runs started without one of their own."""


class RunConflictError(ValueError):
    """A run of that name exists with other settings."""


class DatasetConflictError(ValueError):
    """A dataset asked for with other settings than the stored one of that name."""


class CostCapError(ValueError):
    """A run whose estimated cost would take its spend past its cost cap."""


CAP_RULE = "give a cost cap in USD, a finite number >= 0"
"""What a cost cap must be, in the error that refuses one."""


def is_cost_cap(value: float) -> bool:
    """Whether ``value`` can be a cost cap: a finite number >= 0 (a NaN or infinite cap would
    hold no request back, or let none through)."""
    return math.isfinite(value) and value >= 0


def default_cost_cap() -> float | None:
    """The operator's cost cap per run (``PCF_MAX_COST_USD``), or None."""
    value = os.environ.get(MAX_COST_ENV, "").strip()
    if not value:
        return None
    try:
        cap = float(value)
    except ValueError:
        cap = math.nan
    if not is_cost_cap(cap):
        raise ValueError(f"{MAX_COST_ENV}={value!r}: {CAP_RULE}")
    return cap


def own_key_needed(actor: Actor, backend: str, base_url: str | None) -> bool:
    """Whether a run to ``base_url`` needs a key of the actor's own: the server has a key for
    ``backend`` that may not go there (:func:`pcf.access.key_may_go_to`)."""
    return env_key(backend) is not None and not key_may_go_to(actor, backend, base_url)


def check_start(
    spec: RunSpec, *, session: Session, actor: Actor, api_key: str | None = None
) -> None:
    """Refuse a run ``actor`` may not start: their role, or where the server's key would go
    (a server the operator does not list needs ``api_key``, a key of the actor's own)."""
    actor = authorize(actor, Permission.RUN, session=session)
    if api_key is None and own_key_needed(actor, spec.backend, spec.base_url):
        raise AccessDeniedError(
            f"this server's {key_names(spec.backend)} is sent only to {spec.backend}'s own "
            f"endpoint and to the base URLs the operator lists in {ALLOWED_BASE_URLS_ENV}; "
            f"{spec.base_url} is not one of them. Give a key of your own for this run "
            "(used for it only, never stored), or ask the operator to list the server"
        )


def require_price(spec: RunSpec, cap: float | None, prices: Mapping[str, object]) -> None:
    """Refuse a provider's model that has no price under a cost cap: no cap could hold it."""
    if cap is not None and spec.backend in KEY_ENV and spec.model not in prices:
        raise CostCapError(
            f"model {spec.model!r} has no price, so a cost cap (${cap:.4f}) cannot hold its "
            f"run: give its price in the JSON file PCF_PRICES names, {{{json.dumps(spec.model)}: "
            "[input, output]} in USD per million tokens ([0, 0] for a server of your own)"
        )


def check_cost(spec: RunSpec, cap: float | None, *, session: Session) -> float:
    """What the run has spent so far (its spend ledger: bills and open reservations); refuse it
    (CostCapError) when its estimate passes ``cap``: a stored run is then ``capped``."""
    stored = get_run(spec.run_name, session=session)
    spent = run_spend(stored.id, session=session) if stored is not None else 0.0
    if cap is None:
        return spent
    estimate = estimate_run(spec, session=session)
    if estimate.cost_usd is not None and spent + estimate.cost_usd > cap:
        if stored is not None:
            set_run_status(stored, RunStatus.CAPPED, session=session)
            session.commit()
        raise CostCapError(
            f"run {spec.run_name!r} would cost about ${estimate.cost_usd:.4f} more "
            f"({estimate.to_call} calls) on top of ${spent:.4f} spent, over its cost cap of "
            f"${cap:.4f}: raise the cap or judge fewer items"
        )
    return spent


def backend_problem(
    backend: str, base_url: str | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """None when the app can start runs of ``backend``, else what it needs (a key variable is
    only checked for presence, never shown)."""
    if backend not in APP_BACKENDS:
        return f"{backend} runs start from the command line (pcf judge)"
    if backend not in KEY_ENV or env_key(backend, environ) or (backend == "openai" and base_url):
        return None
    hint = " or give an OpenAI-compatible base URL" if backend == "openai" else ""
    return f"set {key_names(backend)} in the server's environment{hint}"


def open_run(spec: RunSpec, *, session: Session, recorded: Recorded | None = None) -> Run:
    """The run ``spec`` names: created (with a replay's ``recorded`` provenance), or resumed
    when its settings are the same."""
    dataset = dataset_of(spec, session=session)
    run = get_run(spec.run_name, session=session)
    if run is None:
        return create_run(
            spec.run_name,
            session=session,
            dataset_id=dataset.id,
            protocol=spec.protocol,
            backend=spec.backend,
            model=spec.model,
            k=spec.k,
            schedule=spec.schedule,
            seed=spec.seed,
            executions=spec.executions,
            base_url=spec.base_url,
            weights=dict(zip(("ws", "wB", "wv", "wu"), spec.stop_on.as_tuple(), strict=True)),
            settings=RunSettings.of_new_run(spec.identity(), recorded=recorded),
        )
    conflict = settings_conflict(run, spec, session=session)
    if conflict:
        raise RunConflictError(
            f"{conflict}; use the same settings to resume it, or pick another name"
        )
    return run


def open_audited(
    spec: RunSpec,
    *,
    session: Session,
    actor: Actor,
    details: dict[str, Any],
    recorded: Recorded | None = None,
) -> Run:
    """:func:`open_run`, written to the audit log as ``run_started`` or ``run_resumed``."""
    event = "run_started" if get_run(spec.run_name, session=session) is None else "run_resumed"
    run = open_run(spec, session=session, recorded=recorded)
    details = {"backend": spec.backend, "model": spec.model} | details
    add_audit_event(event, session=session, actor=actor.identity, target=run.name, details=details)
    return run


LEASE_TTL_S = 60.0

"""How long a run's lease outlives its holder's last sign of life (on another host; on this
host a holder whose process is gone is dead at once)."""
HEARTBEAT_S = 10.0
"""How often a judging process renews its run's lease."""
LEASE_ATTEMPTS = 20
"""Tries at taking a lease while other processes take or renew it at the same moment."""


class RunBusyError(ValueError):
    """Another live process is judging a run of that name."""


@dataclass(frozen=True)
class Lease:
    """A run lease this process holds (:func:`leased`)."""

    name: str
    holder: str
    session: Session

    def _renew_once(self) -> None:
        renew_run_lease(self.name, session=self.session, holder=self.holder, ttl_s=LEASE_TTL_S)
        renew_key_claims(self.holder, session=self.session, ttl_s=LEASE_TTL_S)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            commit_retrying(self.session, self._renew_once)

    @asynccontextmanager
    async def heartbeat(self) -> AsyncIterator[None]:
        """Renew the lease every :data:`HEARTBEAT_S` seconds meanwhile (in the event loop)."""
        task = asyncio.create_task(self._renew())
        try:
            yield
        finally:
            task.cancel()
            if task.done() and not task.cancelled():
                task.exception()  # a renewal that failed (a lost database): the run's writes tell


@contextmanager
def leased(name: str, *, session: Session) -> Iterator[Lease]:
    """Hold run ``name``'s lease meanwhile (trying again when another process races for it),
    and give it up with its key claims at the end."""
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    for attempt in range(LEASE_ATTEMPTS):
        try:
            busy = take_run_lease(name, session=session, holder=holder, ttl_s=LEASE_TTL_S)
            session.commit()
            break
        except LostRaceError:
            session.rollback()
            if attempt == LEASE_ATTEMPTS - 1:
                raise
    if busy is not None:
        since = busy.acquired_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        raise RunBusyError(
            f"run {name!r} is being judged by another process (pid {busy.pid} on "
            f"{busy.host}, since {since}); wait for it to finish, or choose another name"
        )
    try:
        yield Lease(name, holder, session)
    finally:
        session.rollback()
        release_run_lease(name, session=session, holder=holder)
        release_keys(None, session=session, holder=holder)
        session.commit()


def judge_run(
    spec: RunSpec,
    *,
    session: Session,
    actor: Actor,
    progress: Progress | None = None,
    retry_failed: bool = False,
    api_key: str | None = None,
    max_cost: float | None = None,
    recheck_stops: bool = False,
    on_signal: Callable[[str], None] | None = None,
) -> tuple[Run, RunReport]:
    """Create or resume the run and make its missing calls, holding its lease meanwhile.

    It spends at most ``max_cost`` USD (by default ``PCF_MAX_COST_USD``); ``api_key`` is a key of
    the actor's own for this run only; ``on_signal``: see :func:`~pcf.runs.live.execute`. A bad
    price file or a judge that cannot start leaves no run.
    """
    check_start(spec, session=session, actor=actor, api_key=api_key)
    dataset_of(spec, session=session)
    prices = price_table()  # a price file that cannot be used stops here, before any run exists
    cap = max_cost if max_cost is not None else default_cost_cap()
    require_price(spec, cap, prices)
    if get_run(spec.run_name, session=session) is None:
        check_cost(spec, cap, session=session)  # a run refused here is not created
    judge = make_judge(
        spec.backend,
        spec.model,
        base_url=spec.base_url,
        replay_path=spec.replay,
        seed=spec.seed,
        api_key=api_key,
        timeout=spec.timeout_s,
    )
    name = spec.run_name

    async def go(lease: Lease, run: Run, items: DatasetItems) -> RunReport:
        try:
            async with lease.heartbeat():
                return await execute(
                    run,
                    items,
                    judge,
                    spec,
                    session=session,
                    prices=prices,
                    progress=progress,
                    retry_failed=retry_failed,
                    max_cost=cap,
                    recheck_stops=recheck_stops,
                    holder=lease.holder,
                    on_signal=on_signal,
                )
        finally:
            if hasattr(judge, "aclose"):
                await judge.aclose()

    with leased(name, session=session) as lease:
        if get_run(name, session=session) is not None:
            check_cost(spec, cap, session=session)  # with the lease: no other process spends
        recorded = judge.recorded if isinstance(judge, ReplayJudge) else None
        details = {"base_url": spec.base_url, "own_key": api_key is not None, "max_cost_usd": cap}
        details["timeout_s"] = getattr(judge, "timeout", None)
        run = open_audited(spec, session=session, actor=actor, details=details, recorded=recorded)
        session.commit()
        if any(batch.state != "collected" for batch in run_batches(run.id, session=session)):
            raise ValueError(
                f"run {name!r} has provider batches not collected yet; `pcf batch collect` "
                "them first (or `pcf batch cancel`, or `pcf batch forget` those the provider "
                "lost), so that no request is paid twice"
            )
        items = DatasetItems(run.dataset_id, session=session, limit=spec.limit)
        return run, asyncio.run(go(lease, run, items))


def import_dataset(
    items: Iterable[Item],
    *,
    session: Session,
    actor: Actor,
    name: str,
    fmt: str,
    source_path: str | Path | None = None,
    seed: int = 0,
) -> Dataset:
    """Import ``items`` as dataset ``name`` (all or nothing), as ``actor``."""
    actor = authorize(actor, Permission.IMPORT, session=session)
    dataset = import_items(
        items, session=session, name=name, fmt=fmt, source_path=source_path, seed=seed
    )
    add_audit_event(
        "dataset_imported",
        session=session,
        actor=actor.identity,
        target=name,
        details={"items": dataset.n_items, "format": fmt, "source": str(source_path or "")},
    )
    return dataset


def open_dataset(
    name: str, *, session: Session, actor: Actor, seed: int = 0
) -> tuple[Dataset, bool]:
    """The dataset ``name``, created empty (its items are added by :func:`add_items`) unless
    it exists; whether it was created. An existing dataset keeps its seed.

    Raises:
        DatasetConflictError: an existing dataset of another seed.
        ValueError: a name that cannot be one.
    """
    actor = authorize(actor, Permission.IMPORT, session=session)
    if not name.strip() or "\x00" in name or len(name) > DATASET_NAME_MAX:
        raise ValueError(f"a dataset name has 1 to {DATASET_NAME_MAX} characters, no NUL")
    dataset = get_dataset(name, session=session)
    if dataset is not None:
        if dataset.seed != seed:
            message = f"dataset {name!r} exists with seed {dataset.seed}, not {seed}"
            raise DatasetConflictError(message)
        return dataset, False
    dataset = create_dataset(name, session=session, fmt="jsonl", seed=seed)
    add_audit_event("dataset_created", session=session, actor=actor.identity, target=name)
    return dataset, True


def add_items(
    name: str, rows: list[dict[str, Any]], *, session: Session, actor: Actor, what: str = "items"
) -> dict[str, int]:
    """Add rows in the ``items.jsonl`` schema to dataset ``name``, all or nothing: an item
    already there with the same texts is left as it is; how many were ``added`` and
    ``unchanged``.

    Raises:
        DataError: every problem, each at its row (``line``, from 0) and field (``file`` is
            ``what``); a stored item is never changed (runs judged it).
        ValueError: no such dataset.
    """
    actor = authorize(actor, Permission.IMPORT, session=session)
    dataset = get_dataset(name, session=session)
    if dataset is None:
        raise ValueError(f"no dataset {name!r}; create it first")
    check = FieldChecker(what)
    items = items_from_rows("jsonl", enumerate(rows), check)
    stored = {
        item.item_id: item
        for item in items_named(dataset.id, {i.item_id for i in items}, session=session)
    }
    for line, item in enumerate(items):
        if item.item_id in stored and stored[item.item_id] != item:
            check.add(line, "item_id", f"item {item.item_id!r} is stored with other texts")
    check.raise_if_any()
    new = [item for item in items if item.item_id not in stored]
    append_items(dataset.id, new, session=session)
    counts = {"added": len(new), "unchanged": len(items) - len(new)}
    add_audit_event(
        "items_added", session=session, actor=actor.identity, target=name, details=counts
    )
    return counts


def import_upload(
    data: bytes, filename: str, *, session: Session, actor: Actor, name: str, fmt: str | None = None
) -> Dataset:
    """Import an uploaded file as ``pcf import`` does, in format ``fmt`` or else the one its
    columns fit (:func:`~pcf.items.load_any`: a ValueError when none or several do); the
    dataset's ``format`` says which was read."""
    upload = Path(filename)
    with tempfile.TemporaryDirectory() as folder:
        # its own name, to be named in what is said of it; the loaders read its suffix
        path = Path(folder) / (upload.name if upload.name.strip(".") else "upload")
        try:
            path.write_bytes(data)
            items, fmt = load_any(fmt, path)
        except DataError as exc:
            named = DataError([replace(p, file=upload.name) for p in exc.problems])
            for note in getattr(exc, "__notes__", ()):
                named.add_note(note)
            raise named from None
    return import_dataset(
        items, session=session, actor=actor, name=name, fmt=fmt, source_path=upload.name
    )


def delete_run(name: str, *, session: Session, actor: Actor) -> dict[str, int]:
    """Delete the run, its calls and their replaced answers (never a label), as ``actor``."""
    actor = authorize(actor, Permission.DELETE_RUN, session=session)
    deleted = delete_stored_run(name, session=session)
    add_audit_event(
        "run_deleted", session=session, actor=actor.identity, target=name, details=deleted
    )
    return deleted
