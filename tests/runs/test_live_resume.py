"""A run killed with SIGKILL in the middle resumes and answers every call exactly once.

`pcf judge` runs as a real subprocess with the OpenAI backend against the wire server in this
process; the test waits until some calls are committed, kills it, and runs it again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable

from sqlmodel import Session, col, func, select
from typer.testing import CliRunner

from pcf.cli import app
from pcf.runs.call_plan import plan
from pcf.runs.spec import RunSpec
from pcf.store import Call, call_request, get_dataset, get_run, item_db_ids, load_items
from tests.runs.processes import environment, import_dataset, judge_command
from tests.runs.test_live_providers import listwise_text
from tests.wire_server import Scripted, WireRequest, WireServer, message_key

ITEMS, K, CONCURRENCY = 30, 7, 8
PLANNED = ITEMS * K
LATENCY_S = 0.05
KILL_AFTER_ROWS = 40
HANG_S = 300
"""Bounds only a hang: a loaded machine may take long to start the process and commit."""


def _answer(request: WireRequest) -> Scripted:
    return Scripted.answer(listwise_text(request.last_user_text), delay_s=LATENCY_S)


def _stored_rows(new_session: Callable[[], Session]) -> int:
    """Call rows committed so far, read through a connection of this process."""
    with new_session() as session:
        return session.exec(select(func.count(col(Call.id)))).one()


def _settled_count(server: WireServer) -> int:
    """The server's request count once requests sent before the kill have all been read."""
    count = -1
    while count != server.request_count:
        count = server.request_count
        time.sleep(0.1)
    return count


def test_a_killed_run_resumes_and_answers_every_call_once(tmp_path, isolated_database, new_session):
    """SIGKILL mid-run, run again: one row per planned call, only unrecorded calls re-asked."""
    import_dataset(tmp_path, ITEMS)
    env = environment() | {"PCF_DATABASE_URL": isolated_database}

    with WireServer(_answer) as server:
        command = judge_command(server, k=K, concurrency=CONCURRENCY)
        first = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + HANG_S
        while _stored_rows(new_session) < KILL_AFTER_ROWS:
            assert first.poll() is None, first.stderr.read().decode() if first.stderr else ""
            assert time.monotonic() < deadline, "the first invocation committed too few calls"
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
        first.stderr.close()
        committed = _stored_rows(new_session)
        asked_first = _settled_count(server)
        assert KILL_AFTER_ROWS <= committed < PLANNED
        # answers in flight at the kill reached the server but were never recorded
        in_flight = asked_first - committed
        assert 0 <= in_flight <= CONCURRENCY

        with new_session() as session:
            assert get_run("r", session=session).status == "running"
        # its lease names a process that is gone: listed as interrupted, and resumable now
        listed = CliRunner().invoke(app, ["runs"])
        assert [r["status"] for r in json.loads(listed.stdout)["runs"]] == ["interrupted"]

        second = subprocess.run(
            command, check=False, env=env, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 0, second.stderr
        asked_second = server.request_count - asked_first
        counts = server.counts

    summary = json.loads(second.stdout)["this_invocation"]
    assert summary["already_stored"] == committed
    assert summary["attempts"] == asked_second == PLANNED - committed
    assert summary["failures"] == summary["cache_hits"] == 0

    with new_session() as session:
        run = get_run("r", session=session)
        dataset = get_dataset("ds", session=session)
        items = load_items(dataset.id, session=session)
        planned = plan(items, item_db_ids(dataset.id, session=session), RunSpec("ds", k=K))
        rows = session.exec(select(Call).where(Call.run_id == run.id)).all()
        users = {row.id: call_request(row, session=session)["user"] for row in rows}
    assert run.status == "finished"
    assert (run.calls_made, run.failures) == (PLANNED, 0)
    wanted = [(p.item_db_id, p.execution, p.call_index) for p in planned]
    stored = [(c.item_id, c.execution, c.call_index) for c in rows]
    assert len(wanted) == len(set(wanted)) == PLANNED
    assert sorted(stored) == sorted(wanted)  # none missing, none twice
    for row in rows:
        assert row.ok
        assert row.attempts == 1
        assert row.judgment["ranking"] == row.order  # the answer to this call's own prompt
        assert counts[message_key(users[row.id])] >= 1
    answered_twice = [key for key, n in counts.items() if n > 1]
    assert len(answered_twice) == in_flight <= CONCURRENCY
    assert all(n <= 2 for n in counts.values())
    assert sum(counts.values()) == PLANNED + in_flight
