"""`pcf judge` as real processes against the wire server: two invocations racing for one run
name, a run whose calls mostly fail, `--retry-failed`, progress on stderr and `pcf runs delete`.
Every paid answer must be stored: requests the server received == calls stored."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from datetime import timedelta

import pytest
from sqlmodel import Session, func, select
from typer.testing import CliRunner

from pcf.cli import app
from pcf.store import Adjudication, Call, ReplacedCall, RunLease, add_adjudication, get_run, utc_now
from tests.runs.processes import environment, import_dataset
from tests.runs.processes import judge_command as judge
from tests.runs.test_live_providers import listwise_text
from tests.wire_server import Scripted, WireRequest, WireServer

ITEMS, K = 6, 3
PLANNED = ITEMS * K
HANG_S = 300
"""Bounds only a hang: a loaded machine may take long to start and finish a process."""
runner = CliRunner()


@pytest.fixture
def dataset(tmp_path, isolated_database) -> None:
    """Dataset ``ds``: 6 items of 4 candidates."""
    import_dataset(tmp_path, ITEMS)


def judge_command(server: WireServer, *extra: str) -> list[str]:
    return judge(server, *extra, k=K, concurrency=4)


def count(session: Session, model: type) -> int:
    return session.exec(select(func.count()).select_from(model)).one()


def good_answer(request: WireRequest) -> Scripted:
    return Scripted.answer(listwise_text(request.last_user_text))


def test_two_runs_racing_for_one_name_one_is_refused_and_no_answer_is_lost(dataset, session):
    """Both start at once; the one without the lease exits with one clear line and asks
    nothing, while the other's answers wait at the server; then every answer is stored."""
    gate = threading.Event()

    def held_answer(request: WireRequest) -> Scripted:
        gate.wait()
        return good_answer(request)

    with WireServer(held_answer) as server:
        command = judge_command(server)
        both = [
            subprocess.Popen(
                command, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + HANG_S
        while all(p.poll() is None for p in both):
            assert time.monotonic() < deadline, "neither invocation was refused"
            time.sleep(0.05)
        refused = next(p for p in both if p.poll() is not None)
        holder = next(p for p in both if p is not refused)
        refusal = refused.stderr.read().decode()
        gate.set()
        out, err = holder.communicate(timeout=HANG_S)
        refused.stdout.close()
        refused.stderr.close()
        assert holder.returncode == 0, err.decode()
        assert refused.returncode == 2
        assert "Traceback" not in refusal
        assert "run 'r' is being judged by another process" in refusal
        assert len(refusal.strip().splitlines()) == 1
        asked = server.request_count

    assert json.loads(out)["this_invocation"]["attempts"] == PLANNED
    assert asked == count(session, Call) == PLANNED
    assert count(session, ReplacedCall) == 0
    assert count(session, RunLease) == 0  # given up when the run ended


def test_a_run_whose_calls_mostly_fail_exits_1_and_retry_failed_asks_them_again(dataset, session):
    """Refused requests: exit 1 with a one-line cause; then --retry-failed stores the new
    answers as the calls' answers and keeps each failed one as a replaced call."""
    answers = {"mode": "refuse"}

    def respond(request: WireRequest) -> Scripted:
        if answers["mode"] == "refuse":
            return Scripted.error(400, "model not served here")
        return good_answer(request)

    with WireServer(respond) as server:
        first = subprocess.run(
            judge_command(server), env=environment(), capture_output=True, text=True, check=False
        )
        assert first.returncode == 1, first.stderr
        assert "Traceback" not in first.stderr
        cause = [line for line in first.stderr.splitlines() if line.startswith("error:")]
        assert len(cause) == 1
        assert cause[0].startswith(
            f"error: run r: {PLANNED} of {PLANNED} calls failed (client_error x{PLANNED}); "
            "first: client_error"
        )
        assert "model not served here" in cause[0]
        # not a terminal: a plain progress line when the calls are done
        assert f"judging r: {PLANNED}/{PLANNED} calls, 0 cache hits, {PLANNED} failed" in (
            first.stderr
        )
        assert json.loads(first.stdout)["this_invocation"]["failures"] == PLANNED

        again = subprocess.run(
            judge_command(server), env=environment(), capture_output=True, text=True, check=False
        )
        assert again.returncode == 0  # nothing left to ask: the failed calls stay failed
        assert json.loads(again.stdout)["this_invocation"]["attempts"] == 0

        answers["mode"] = "answer"
        retried = subprocess.run(
            [*judge_command(server), "--retry-failed"],
            env=environment(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert retried.returncode == 0, retried.stderr
        asked = server.request_count

    summary = json.loads(retried.stdout)["this_invocation"]
    assert summary["retried_failed"] == summary["attempts"] == PLANNED
    assert summary["failures"] == 0
    assert asked == 2 * PLANNED
    calls = session.exec(select(Call)).all()
    replaced = session.exec(select(ReplacedCall)).all()
    run = get_run("r", session=session)
    assert len(calls) == PLANNED
    assert all(c.ok for c in calls)
    assert (run.status, run.failures) == ("finished", 0)
    # each failed answer is kept whole, attached to the call that now holds the new answer
    assert sorted(r.call_id for r in replaced) == sorted(c.id for c in calls)
    assert {r.reason for r in replaced} == {"retried"}
    assert all(
        not r.values["ok"] and r.values["error"].startswith("client_error") for r in replaced
    )


def test_runs_delete_asks_keeps_adjudications_and_refuses_a_live_run(dataset, session):
    with WireServer(good_answer) as server:
        done = subprocess.run(
            judge_command(server), env=environment(), capture_output=True, text=True, check=False
        )
    assert done.returncode == 0, done.stderr
    item_id = session.exec(select(Call.item_id)).first()
    add_adjudication(item_id, session=session, annotator="ana", choice="c0")
    session.commit()

    kept = runner.invoke(app, ["runs", "delete", "r"], input="n\n")
    assert kept.exit_code == 1
    assert "nothing deleted" in kept.output
    assert count(session, Call) == PLANNED

    lease = RunLease(  # a live process (this one) holds the lease
        run_name="r",
        holder="another invocation",
        host=socket.gethostname(),
        pid=os.getpid(),
        expires_at=utc_now() + timedelta(hours=1),
    )
    session.add(lease)
    session.commit()
    busy = runner.invoke(app, ["runs", "delete", "r", "--yes"])
    assert busy.exit_code == 1
    assert "is being judged now" in busy.output

    session.delete(lease)
    session.commit()
    deleted = runner.invoke(app, ["runs", "delete", "r", "--yes"])
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.stdout) == {"deleted": "r", "calls": PLANNED, "replaced_calls": 0}
    assert count(session, Call) == 0
    assert count(session, Adjudication) == 1
    listed = json.loads(runner.invoke(app, ["runs"]).stdout)
    assert listed["runs"] == []
