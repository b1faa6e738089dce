"""Background runs: their own thread and session, progress readable while they go."""

from __future__ import annotations

import threading
import time

import pytest
from sqlmodel import func, select

from pcf.access import operator
from pcf.runs import background
from pcf.runs.background import background_runs, cancel_run, start_run
from pcf.runs.spec import RunSpec
from pcf.runs.study import DEMO_RUNS
from pcf.store import Call, get_run, list_runs

TIMEOUT_S = 300  # only bounds a hang: a loaded machine may take minutes


def wait_until_done(engine, name: str):
    """The run's last snapshot once it is no longer active."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        progress = next(p for p in background_runs(engine) if p.name == name)
        if not progress.active:
            return progress
        time.sleep(0.05)
    raise AssertionError(f"run {name} did not finish in {TIMEOUT_S} s")


def test_a_background_run_stores_its_calls_and_reports_progress(demo_engine, db):
    started = start_run(
        demo_engine, RunSpec("demo", "bg", model="sim-bg", k=3, limit=4), actor=operator()
    )
    assert started.active
    progress = wait_until_done(demo_engine, "bg")
    assert progress.status == "finished", progress.error
    assert (progress.done, progress.total, progress.fraction) == (12, 12, 1.0)
    assert progress.report.calls_made == 12
    run = get_run("bg", session=db)
    calls = db.exec(select(func.count()).select_from(Call).where(Call.run_id == run.id)).one()
    assert (run.status, calls) == ("finished", 12)
    assert [p.name for p in background_runs(demo_engine, "demo")] == ["bg"]
    assert background_runs(demo_engine, "other") == []


def test_a_run_that_cannot_resume_fails_with_the_reason(demo_engine, db):
    start_run(demo_engine, RunSpec("demo", "demo-pcf", k=3), actor=operator())
    progress = wait_until_done(demo_engine, "demo-pcf")
    assert progress.status == "failed"
    assert "exists with other settings" in progress.error
    assert get_run("demo-pcf", session=db).status == "finished"


def test_a_provider_without_a_key_fails_and_leaves_no_run_behind(demo_engine, db, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    start_run(
        demo_engine,
        RunSpec("demo", "nokey", backend="anthropic", model="claude-x", protocol="direct"),
        actor=operator(),
    )
    progress = wait_until_done(demo_engine, "nokey")
    assert progress.status == "failed"
    assert "ANTHROPIC_API_KEY" in progress.error
    assert get_run("nokey", session=db) is None  # no empty pending run for the pages
    assert {r.name for r in list_runs(session=db)} == {d.run_name for d in DEMO_RUNS}


def test_the_same_run_cannot_start_twice_at_once(demo_engine):
    spec = RunSpec("demo", "twice", model="s2", k=7, executions=3)
    start_run(demo_engine, spec, actor=operator())
    with pytest.raises(ValueError, match="already running"):
        start_run(demo_engine, spec, actor=operator())
    assert wait_until_done(demo_engine, "twice").status == "finished"


def test_a_cancelled_run_stops_after_its_stored_call_and_resumes_later(
    demo_engine, db, monkeypatch
):
    """Cancelled before its first call (the thread waits for the test), the run stores that
    call and stops; started again, it makes only the calls left."""
    gate = threading.Event()
    judge = background.judge_run

    def held(*args, **kwargs):
        gate.wait(TIMEOUT_S)
        return judge(*args, **kwargs)

    monkeypatch.setattr(background, "judge_run", held)
    spec = RunSpec("demo", "cancelled", model="sim-bg", k=3, limit=4, concurrency=1)
    start_run(demo_engine, spec, actor=operator())
    assert cancel_run(demo_engine, "cancelled")
    gate.set()
    progress = wait_until_done(demo_engine, "cancelled")
    assert progress.status == "cancelled", progress.error
    run = get_run("cancelled", session=db)
    stored = db.exec(select(func.count()).select_from(Call).where(Call.run_id == run.id)).one()
    assert (run.status, stored) == ("failed", 1)
    assert not cancel_run(demo_engine, "cancelled")  # not going any more
    start_run(demo_engine, spec, actor=operator())
    resumed = wait_until_done(demo_engine, "cancelled")
    assert (resumed.status, resumed.report.calls_made) == ("finished", 11)
