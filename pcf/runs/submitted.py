"""Runs a client submits (the HTTP API): one run per member and idempotency key, judged by the
server's background runner (:mod:`pcf.runs.background`), resumed when a restarted server
starts, cancelled on request. The settings a client may give are :class:`RunRequest`'s."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session

from pcf.access import AccessDeniedError, Actor, Permission, Role, authorize
from pcf.choices import SIMULATED_MODEL
from pcf.judges import parse_model
from pcf.prices import run_cost
from pcf.runs.background import background_runs, cancel_run, start_run
from pcf.runs.estimate import CostEstimate, dataset_of, estimate_run
from pcf.runs.manage import APP_BACKENDS, check_start
from pcf.runs.spec import RunSpec
from pcf.store import (
    ACTIVE_RUN_STATUSES,
    ApiRun,
    api_runs_to_resume,
    cancel_api_run,
    claim_api_run,
    get_api_run,
    get_member,
    get_run,
    session_scope,
    write_with_retry,
)

STATUS_FIELDS = (
    "name",
    "status",
    "done",
    "total",
    "error",
    "attempts",
    "cache_hits",
    "failures",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "created_at",
    "finished_at",
)
"""What :func:`run_status` tells of a run."""


class IdempotencyConflictError(ValueError):
    """An idempotency key used before for another request, or a run name another key took."""


@dataclass(frozen=True)
class RunRequest:
    """What a client may ask of a run: the CLI's ``pcf judge`` settings, without a replay file
    or a key of their own (the server's keys go only where the operator allows)."""

    dataset: str
    name: str | None = None
    model: str = SIMULATED_MODEL
    protocol: str = "pcf"
    k: int = 7
    schedule: str = "balanced"
    executions: int = 1
    seed: int = 0
    temperature: float = 0.0
    max_tokens: int = 2048
    limit: int | None = None
    max_cost: float | None = None

    def spec(self) -> RunSpec:
        """The run's spec.

        Raises:
            ValueError: a setting :class:`RunSpec` refuses, or a backend the app may not use.
        """
        judge = parse_model(self.model)
        if judge.backend not in APP_BACKENDS:
            raise ValueError(f"model {self.model!r}: choose a provider of {APP_BACKENDS}")
        settings = asdict(self)
        del settings["model"], settings["max_cost"]
        return RunSpec(**settings, **judge._asdict())


@dataclass(frozen=True)
class Submitted:
    """A submitted run: its name, and whether this request started it (not an earlier one)."""

    name: str
    started: bool


def submit_run(
    request: RunRequest, key: str, *, engine: Engine, actor: Actor, max_keys: int = 200
) -> Submitted:
    """Start the run ``request`` asks for in the background, once per ``actor`` and ``key``:
    the same key again (also at once) answers with the run it started.

    Raises:
        IdempotencyConflictError: the key named another request, or the run another key's.
        AccessDeniedError: the actor may not start runs, or not to that server.
        ValueError: bad settings, or no such dataset.
    """
    if not key.strip() or len(key) > max_keys:
        raise ValueError(f"Idempotency-Key: give 1 to {max_keys} characters")
    spec = request.spec()
    asked = asdict(request)

    def claim(session: Session) -> tuple[ApiRun | None, bool]:
        check_start(spec, session=session, actor=actor)
        dataset_of(spec, session=session)
        return claim_api_run(
            spec.run_name, session=session, email=actor.identity, idempotency_key=key, request=asked
        )

    claimed, new = write_with_retry(engine, claim)  # two at once on SQLite: one tries again
    if claimed is None:
        raise IdempotencyConflictError(
            f"run {spec.run_name!r} was submitted with another Idempotency-Key; give it a name"
        )
    if claimed.request != asked:
        raise IdempotencyConflictError(
            f"Idempotency-Key {key!r} was used for another request (run {claimed.run_name!r})"
        )
    if not new:
        return Submitted(claimed.run_name, started=False)
    start_run(engine, spec, actor=actor, max_cost=request.max_cost)
    return Submitted(spec.run_name, started=True)


def estimate(request: RunRequest, *, engine: Engine, actor: Actor) -> CostEstimate:
    """What running ``request`` would call and cost (as ``pcf judge`` estimates it).

    Raises:
        AccessDeniedError: the actor may not start runs.
        ValueError: bad settings, or no such dataset.
    """
    spec = request.spec()
    with session_scope(engine) as session:
        authorize(actor, Permission.RUN, session=session)
        return estimate_run(spec, session=session)


def run_status(name: str, *, engine: Engine) -> dict[str, Any] | None:
    """A run's status, progress and spend (``cost_usd`` None: its model is unpriced): the stored
    run's, with this server's background progress while it judges it; ``starting`` for a
    submitted run not stored yet; None for no such run."""
    with session_scope(engine) as session:
        run, submitted = get_run(name, session=session), get_api_run(name, session=session)
    if run is None:
        if submitted is None:
            return None
        return dict.fromkeys(STATUS_FIELDS) | {
            "name": name,
            "status": "starting",
            "created_at": submitted.created_at.isoformat(),
        }
    going = {p.name: p for p in background_runs(engine)}.get(run.name)
    status = run.status
    if going is not None and going.status in ("starting", "running", "cancelled"):
        status = going.status
    return {
        "name": run.name,
        "status": status,
        "done": going.done if going else None,
        "total": going.total if going else None,
        "error": going.error if going else None,
        "attempts": run.calls_made,
        "cache_hits": run.cache_hits,
        "failures": run.failures,
        "cost_usd": run_cost(run),
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


def cancel(name: str, *, engine: Engine, actor: Actor) -> bool:
    """Cancel run ``name``: a restarted server does not resume it, and this server's thread
    stops after its answered calls are stored; whether it was going here.

    Raises:
        AccessDeniedError: the actor may not run.
    """
    with session_scope(engine) as session:
        authorize(actor, Permission.RUN, session=session)
        if get_api_run(name, session=session) is not None:
            cancel_api_run(name, session=session)
    return cancel_run(engine, name)


def resume_runs(engine: Engine) -> list[str]:
    """Start again the submitted runs a stopped server left unfinished (not cancelled, stored
    as pending or running, or not stored yet), as their members with their roles now; the
    names started. A member removed since is refused (the run is left as it is)."""
    started = []
    with session_scope(engine) as session:
        waiting = [
            record
            for record in api_runs_to_resume(session=session)
            if (run := get_run(record.run_name, session=session)) is None
            or run.status in ACTIVE_RUN_STATUSES
        ]
        members = {r.email: get_member(r.email, session=session) for r in waiting}
    for record in waiting:
        member = members[record.email]
        if member is None:
            continue
        request = RunRequest(**record.request)
        try:
            start_run(engine, request.spec(), actor=Actor(member.email, Role(member.role)))
        except (AccessDeniedError, ValueError):
            continue  # refused now (a role changed, a dataset gone): left as it is
        started.append(record.run_name)
    return started
