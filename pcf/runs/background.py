"""Judge runs in background threads, each with its own event loop and session, with progress
in a module-level registry keyed by database and run name, so that it survives page reruns and
every browser session of the server process sees it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from pcf.access import Actor
from pcf.runs.manage import CostCapError, RunBusyError, RunConflictError, check_start, judge_run
from pcf.runs.rows import RunReport
from pcf.runs.spec import RunSpec
from pcf.store import (
    ACTIVE_RUN_STATUSES,
    RunStatus,
    get_run,
    session_scope,
    set_run_status,
    storage_problem,
    utc_now,
)

ACTIVE_STATUSES = ("starting", "running")


class RunCancelledError(Exception):
    """Raised in a background run's thread after :func:`cancel_run`: it stops after its
    answered calls are stored."""


@dataclass(frozen=True)
class RunProgress:
    """A snapshot of one background run (``status``: starting, running, finished, capped,
    failed or cancelled; ``done`` of ``total`` calls of this invocation answered)."""

    name: str
    dataset: str
    status: str = "starting"
    done: int = 0
    total: int = 0
    started_at: datetime = field(default_factory=utc_now)
    finished_at: datetime | None = None
    report: RunReport | None = None
    error: str | None = None

    @property
    def active(self) -> bool:
        """Whether the run is still going."""
        return self.status in ACTIVE_STATUSES

    @property
    def fraction(self) -> float:
        """Share of this invocation's calls answered (0-1)."""
        return self.done / self.total if self.total else float(not self.active)


_registry: dict[tuple[str, str], RunProgress] = {}
_cancelled: set[tuple[str, str]] = set()
_registry_lock = threading.Lock()


def _update(key: tuple[str, str], **changes: Any) -> None:
    with _registry_lock:
        _registry[key] = replace(_registry[key], **changes)


def _database(engine: Engine) -> str:
    """The registry's name for the engine's database (no password)."""
    return engine.url.render_as_string(hide_password=True)


def start_run(
    engine: Engine,
    spec: RunSpec,
    *,
    actor: Actor,
    api_key: str | None = None,
    max_cost: float | None = None,
) -> RunProgress:
    """Start (or resume) the run ``spec`` names in a background thread, as ``actor`` (checked
    before the thread); ``api_key`` and ``max_cost`` are :func:`~pcf.runs.manage.judge_run`'s."""
    with session_scope(engine) as session:
        check_start(spec, session=session, actor=actor, api_key=api_key)
    name = spec.run_name
    key = (_database(engine), name)
    with _registry_lock:
        if key in _registry and _registry[key].active:
            raise ValueError(f"run {name!r} is already running; wait for it to finish")
        started = _registry[key] = RunProgress(name, spec.dataset)
        _cancelled.discard(key)

    def progress(report: RunReport) -> None:
        _update(key, status="running", done=report.done, total=report.to_do)
        if key in _cancelled:
            raise RunCancelledError(f"run {name!r} was cancelled")

    def work() -> None:
        try:
            with session_scope(engine) as session:
                _, report = judge_run(
                    spec,
                    session=session,
                    actor=actor,
                    progress=progress,
                    api_key=api_key,
                    max_cost=max_cost,
                )
            status = "capped" if report.capped else "finished"
            _update(key, status=status, report=report, finished_at=utc_now())
        except (RunConflictError, RunBusyError, CostCapError) as exc:  # leave the run be
            _update(key, status="failed", error=str(exc), finished_at=utc_now())
        except RunCancelledError as exc:  # the answered calls stay; starting it again resumes
            _mark_failed(engine, spec.run_name)
            _update(key, status="cancelled", error=str(exc), finished_at=utc_now())
        except Exception as exc:  # the page shows every failure, whatever it is
            error = storage_problem(exc, _database(engine)) or f"{type(exc).__name__}: {exc}"
            try:
                _mark_failed(engine, spec.run_name)
            except Exception as marking:  # the database cannot be written: the run is interrupted
                if storage_problem(marking, _database(engine)) is None:
                    raise
            finally:
                _update(key, status="failed", error=error, finished_at=utc_now())

    threading.Thread(target=work, name=f"pcf-run-{name}", daemon=True).start()
    return started


def cancel_run(engine: Engine, name: str) -> bool:
    """Ask this process's background run ``name`` on ``engine`` to stop after the call it is
    storing; whether it was going."""
    key = (_database(engine), name)
    with _registry_lock:
        going = key in _registry and _registry[key].active
        if going:
            _cancelled.add(key)
    return going


def _mark_failed(engine: Engine, name: str) -> None:
    """Leave the stored run as failed (its answered calls stay; starting it again resumes)."""
    with session_scope(engine) as session:
        run = get_run(name, session=session)
        if run is not None and run.status in ACTIVE_RUN_STATUSES:
            set_run_status(run, RunStatus.FAILED, session=session)


def background_runs(engine: Engine, dataset: str | None = None) -> list[RunProgress]:
    """Snapshots of this process's background runs on ``engine`` (of ``dataset`` when given),
    oldest first."""
    database = _database(engine)
    with _registry_lock:
        snapshots = [p for (db, _), p in _registry.items() if db == database]
    return [p for p in snapshots if dataset is None or p.dataset == dataset]
