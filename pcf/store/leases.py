"""Leases and claims: one live process per run, runs taken over from dead holders, and the
content keys being answered now. Functions flush, never commit."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    bindparam,
    delete,
    insert,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from pcf.processes import process_exists
from pcf.store.datasets import _chunks, rows_changed
from pcf.store.engine import LostRaceError
from pcf.store.models import (
    KeyClaim,
    RunLease,
    RunStatus,
    insert_new,
    utc_now,
)

ACTIVE_RUN_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING)


def lease_is_live(lease: RunLease | KeyClaim, now: datetime | None = None) -> bool:
    """Whether the lease's (or claim's) holder may still be working: its time has not run out
    and, when it was taken on this host, its process still exists."""
    if lease.expires_at <= (now or utc_now()):
        return False
    return lease.host != socket.gethostname() or process_exists(lease.pid)


def _taken_by(holder: str, now: datetime, ttl_s: float) -> dict[str, Any]:
    """The columns of a lease or claim that ``holder`` (this process) takes at ``now``."""
    pid, expires_at = os.getpid(), now + timedelta(seconds=ttl_s)
    return {"holder": holder, "host": socket.gethostname(), "pid": pid, "expires_at": expires_at}


def _update_held(key: Any, value: Any, by: str, *, session: Session, **values: Any) -> bool:
    """Set ``values`` on the lease or claim (``key`` its primary key column) while ``by``
    holds it; whether it did (False: another process took it first)."""
    table = key.class_
    changed = session.execute(
        update(table)
        .where(key == value, col(table.holder) == by)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return rows_changed(changed) == 1


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
    """Take the lease of ``run_name`` for ``holder``, unless a live holder has it (a dead one
    is taken over); None when ``holder`` now holds it, else the other holder's live lease.

    Raises:
        LostRaceError: another process took or renewed the lease at the same time.
    """
    now = utc_now()
    mine = _taken_by(holder, now, ttl_s) | {"acquired_at": now}
    current = _lease(run_name, session=session)
    if current is None:
        try:
            session.execute(insert(RunLease), [{"run_name": run_name, **mine}])
        except IntegrityError as exc:
            raise LostRaceError(f"run {run_name!r} was taken at the same time") from exc
        return None
    if current.holder != holder and lease_is_live(current, now):
        return current
    if not _update_held(col(RunLease.run_name), run_name, current.holder, session=session, **mine):
        raise LostRaceError(f"run {run_name!r} was taken at the same time")
    return None


def renew_run_lease(run_name: str, *, session: Session, holder: str, ttl_s: float) -> bool:
    """Push the lease's expiry ``ttl_s`` seconds ahead; False when ``holder`` lost it."""
    expires_at = utc_now() + timedelta(seconds=ttl_s)
    key = col(RunLease.run_name)
    return _update_held(key, run_name, holder, session=session, expires_at=expires_at)


def release_run_lease(run_name: str, *, session: Session, holder: str) -> None:
    """Give the lease up (nothing happens when ``holder`` no longer holds it)."""
    session.execute(
        delete(RunLease).where(col(RunLease.run_name) == run_name, col(RunLease.holder) == holder)
    )


def _claims(chunk: list[str], *, session: Session) -> Any:
    """The claims of these content keys as stored now."""
    return session.exec(
        select(KeyClaim)
        .where(col(KeyClaim.content_key).in_(chunk))
        .execution_options(populate_existing=True)
    ).all()


def claim_keys(
    content_keys: Iterable[str], *, session: Session, holder: str, ttl_s: float
) -> set[str]:
    """Claim requests about to be sent for ``holder``, except those a live other holder
    claims (dead claims are taken over); the keys ``holder`` holds now."""
    now = utc_now()
    mine = _taken_by(holder, now, ttl_s)
    held: set[str] = set()
    for chunk in _chunks(content_keys):
        insert_new(KeyClaim, [{"content_key": key, **mine} for key in chunk], session=session)
        for claim in _claims(chunk, session=session):
            key, other = col(KeyClaim.content_key), claim.holder
            if other == holder or (
                not lease_is_live(claim, now)
                and _update_held(key, claim.content_key, other, session=session, **mine)
            ):
                held.add(claim.content_key)
    return held


def live_claims(content_keys: Iterable[str], *, session: Session) -> set[str]:
    """The content keys among ``content_keys`` that a live holder claims now."""
    now, chunks = utc_now(), _chunks(content_keys)
    claims = (claim for chunk in chunks for claim in _claims(chunk, session=session))
    return {claim.content_key for claim in claims if lease_is_live(claim, now)}


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
