"""Run leases: one live holder per run name; a lease whose time ran out, or whose process is
gone from this host, is dead and taken over; a run left running without a live lease is shown
as interrupted."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

from sqlmodel import Session

from pcf.store import (
    RunLease,
    import_items,
    lease_is_live,
    release_run_lease,
    renew_run_lease,
    run_states,
    set_run_status,
    take_run_lease,
    utc_now,
)
from tests.factories import make_item, stored_run

TTL_S = 60.0


def gone_pid() -> int:
    """The id of a process of this host that has ended."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(child.stdout)


def lease(host: str, pid: int, expires_in_s: float) -> RunLease:
    return RunLease(
        run_name="r",
        holder=f"{host}:{pid}:x",
        host=host,
        pid=pid,
        expires_at=utc_now() + timedelta(seconds=expires_in_s),
    )


def test_liveness_is_time_and_on_this_host_the_process():
    here = socket.gethostname()
    assert lease_is_live(lease(here, os.getpid(), TTL_S))
    assert not lease_is_live(lease(here, os.getpid(), -1))  # expired
    assert not lease_is_live(lease(here, gone_pid(), TTL_S))  # its process ended
    assert lease_is_live(lease("another-host", gone_pid(), TTL_S))  # cannot tell: trust time
    assert not lease_is_live(lease("another-host", 1, -1))


def test_a_live_lease_refuses_a_dead_one_is_taken_over(session: Session):
    assert take_run_lease("r", session=session, holder="me", ttl_s=TTL_S) is None
    session.commit()
    assert take_run_lease("r", session=session, holder="me", ttl_s=TTL_S) is None  # mine
    busy = take_run_lease("r", session=session, holder="you", ttl_s=TTL_S)
    assert busy is not None
    assert busy.holder == "me"
    assert busy.pid == os.getpid()

    assert renew_run_lease("r", session=session, holder="me", ttl_s=-1)  # let it run out
    session.commit()
    assert take_run_lease("r", session=session, holder="you", ttl_s=TTL_S) is None
    session.commit()
    assert not renew_run_lease("r", session=session, holder="me", ttl_s=TTL_S)  # lost it
    release_run_lease("r", session=session, holder="me")  # not mine: nothing happens
    assert session.get(RunLease, "r").holder == "you"
    release_run_lease("r", session=session, holder="you")
    session.commit()
    assert session.get(RunLease, "r") is None


def test_a_running_run_without_a_live_lease_is_interrupted(session: Session):
    dataset = import_items([make_item("q0")], session=session, name="ds", fmt="jsonl")
    runs = [
        stored_run(session, dataset.id, name=name) for name in ("live", "killed", "expired", "done")
    ]
    for run in runs[:3]:
        set_run_status(run, "running", session=session)
    set_run_status(runs[3], "finished", session=session)
    here = socket.gethostname()
    session.add(lease(here, os.getpid(), TTL_S).sqlmodel_update({"run_name": "live"}))
    session.add(lease(here, gone_pid(), TTL_S).sqlmodel_update({"run_name": "killed"}))
    session.add(lease(here, os.getpid(), -1).sqlmodel_update({"run_name": "expired"}))
    states = run_states(runs, session=session)
    assert [states[r.id] for r in runs] == ["running", "interrupted", "interrupted", "finished"]
