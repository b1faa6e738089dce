"""Run management: create a run or resume it, make its missing calls, and say which backends
this process can use."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Mapping

from sqlmodel import Session

from pcf.judges import KEY_ENV, make_judge
from pcf.prices import price_table
from pcf.runs.engine import Progress, RunReport, execute
from pcf.runs.spec import RunSpec
from pcf.store.engine import LostRaceError
from pcf.store.models import Dataset, Run
from pcf.store.queries import (
    create_run,
    get_dataset,
    get_dataset_by_id,
    get_run,
    item_db_ids,
    load_items,
    release_run_lease,
    renew_run_lease,
    run_batches,
    take_run_lease,
)

APP_BACKENDS = ("simulated", "openai", "anthropic")
DEFAULT_MODELS = {
    "simulated": "sim-primacy",
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-20241022",
}


CANONICAL_SETTING = "canonical_orders"
"""Marks runs whose canonical orders come from the dataset seed (all runs created since)."""


class RunConflictError(ValueError):
    """A run of that name exists with other settings."""


def backend_availability(
    base_url: str | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str | None]:
    """For each backend the app offers, None when it can be used, else what it needs.

    A provider is usable when its key variable (:data:`pcf.judges.KEY_ENV`) is set; ``openai``
    also when an OpenAI-compatible ``base_url`` is given (self-hosted servers need no key).
    Only the variable's presence is read, never shown.
    """
    environ = os.environ if environ is None else environ
    out: dict[str, str | None] = {}
    for backend in APP_BACKENDS:
        variable = KEY_ENV.get(backend)
        if variable is None or environ.get(variable) or (backend == "openai" and base_url):
            out[backend] = None
        else:
            hint = " or give an OpenAI-compatible base URL" if backend == "openai" else ""
            out[backend] = f"set {variable} in the server's environment{hint}"
    return out


def require_dataset(spec: RunSpec, *, session: Session) -> Dataset:
    """The dataset the run judges.

    Raises:
        ValueError: no dataset of that name.
    """
    dataset = get_dataset(spec.dataset, session=session)
    if dataset is None:
        raise ValueError(f"no dataset {spec.dataset!r}; import one with `pcf import`")
    return dataset


def settings_conflict(run: Run, spec: RunSpec, *, session: Session) -> str | None:
    """Why ``run`` cannot be resumed as ``spec`` (what differs), or None when it can."""
    theirs_dataset = get_dataset_by_id(run.dataset_id, session=session)
    mine = {
        "dataset": spec.dataset,
        "backend": spec.backend,
        "model": spec.model,
        "base_url": spec.base_url,
    } | spec.identity()
    theirs = {
        "dataset": theirs_dataset.name if theirs_dataset else None,
        "backend": run.backend,
        "model": run.model,
        "base_url": run.base_url,
    } | run.settings.get("identity", {})
    changed = sorted(k for k in mine if mine[k] != theirs.get(k))
    if not changed:
        return _canonical_conflict(run, theirs_dataset)
    detail = ", ".join(f"{k}: {theirs.get(k)!r} -> {mine[k]!r}" for k in changed)
    return f"run {run.name!r} exists with other settings ({detail})"


def _canonical_conflict(run: Run, dataset: Dataset | None) -> str | None:
    """Why a run stored before canonical orders followed the dataset seed cannot resume.

    Such a run seeded its canonical orders with its own seed; its plan is the same only when
    that equals the dataset's seed.
    """
    if CANONICAL_SETTING in run.settings or dataset is None or run.seed == dataset.seed:
        return None
    return (
        f"run {run.name!r} was planned with canonical orders from its own seed {run.seed}, "
        f"but they now come from the dataset's seed {dataset.seed}"
    )


def open_run(spec: RunSpec, *, session: Session) -> Run:
    """The run ``spec`` names: created, or resumed when its settings are the same.

    Raises:
        ValueError: no dataset of that name.
        RunConflictError: a run of that name exists with other settings.
    """
    dataset = require_dataset(spec, session=session)
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
            settings={
                "identity": spec.identity(),
                "ballpark_guard": spec.ballpark_guard,
                CANONICAL_SETTING: "dataset_seed",
            },
        )
    conflict = settings_conflict(run, spec, session=session)
    if conflict:
        raise RunConflictError(
            f"{conflict}; use the same settings to resume it, or pick another name"
        )
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


def take_lease(name: str, holder: str, *, session: Session) -> None:
    """Hold the lease of run ``name`` (committed), trying again when another process races.

    Raises:
        RunBusyError: a live process holds it.
    """
    for attempt in range(LEASE_ATTEMPTS):
        try:
            busy = take_run_lease(name, session=session, holder=holder, ttl_s=LEASE_TTL_S)
            session.commit()
        except LostRaceError:
            session.rollback()
            if attempt == LEASE_ATTEMPTS - 1:
                raise
            continue
        if busy is None:
            return
        since = busy.acquired_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        raise RunBusyError(
            f"run {name!r} is being judged by another process (pid {busy.pid} on "
            f"{busy.host}, since {since}); wait for it to finish, or pick another --name"
        )


async def keep_lease(name: str, holder: str, *, session: Session) -> None:
    """Renew the lease every :data:`HEARTBEAT_S` seconds while the run goes on."""
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        renew_run_lease(name, session=session, holder=holder, ttl_s=LEASE_TTL_S)
        session.commit()


def judge_run(
    spec: RunSpec,
    *,
    session: Session,
    progress: Progress | None = None,
    retry_failed: bool = False,
    recheck_stops: bool = False,
) -> tuple[Run, RunReport]:
    """Create or resume the run and make its missing calls, holding its lease meanwhile.

    The judge is built first, so a judge that cannot start (no key) leaves no run behind. Only
    one process at a time judges a run: its lease (:class:`~pcf.store.models.RunLease`) is
    taken before the run is opened and given up when this returns or raises.
    ``progress(report)`` is called after every answered call. With ``retry_failed``, the
    run's failed calls are asked again; with ``recheck_stops``, an adaptive run asks the current
    stopping policy again about the items it stopped (see :func:`~pcf.runs.engine.execute`).

    Returns:
        The run, and what this invocation did.

    Raises:
        ValueError: no dataset of that name, the judge cannot start, the protocol cannot
            run on its items, or the run has provider batches not collected yet.
        RunConflictError: a run of that name exists with other settings.
        RunBusyError: another live process is judging the run.
    """
    require_dataset(spec, session=session)
    judge = make_judge(
        spec.backend, spec.model, base_url=spec.base_url, replay_path=spec.replay, seed=spec.seed
    )
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    name = spec.run_name

    async def go(run: Run, items: list, db_ids: dict[str, int]) -> RunReport:
        heartbeat = asyncio.create_task(keep_lease(name, holder, session=session))
        try:
            return await execute(
                run,
                items,
                judge,
                spec,
                session=session,
                db_ids=db_ids,
                prices=price_table(),
                progress=progress,
                retry_failed=retry_failed,
                recheck_stops=recheck_stops,
            )
        finally:
            heartbeat.cancel()
            if hasattr(judge, "aclose"):
                await judge.aclose()

    take_lease(name, holder, session=session)
    try:
        run = open_run(spec, session=session)
        session.commit()
        if any(batch.state != "collected" for batch in run_batches(run.id, session=session)):
            raise ValueError(
                f"run {name!r} has provider batches not collected yet; `pcf batch collect` "
                "them first (or `pcf batch cancel`, or `pcf batch forget` those the provider "
                "lost), so that no request is paid twice"
            )
        items = load_items(run.dataset_id, session=session)[: spec.limit]
        db_ids = item_db_ids(run.dataset_id, session=session)
        return run, asyncio.run(go(run, items, db_ids))
    finally:
        session.rollback()
        release_run_lease(name, session=session, holder=holder)
        session.commit()
