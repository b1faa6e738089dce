"""Run management: create a run or resume it, make its missing calls, and say which backends
this process can use."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

from sqlmodel import Session

from pcf.consensus import DEFAULT_WEIGHTS
from pcf.judges import KEY_ENV, make_judge
from pcf.prices import price_table
from pcf.runs.engine import Progress, RunReport, execute
from pcf.runs.spec import RunSpec
from pcf.store.models import Dataset, Run
from pcf.store.queries import (
    create_run,
    get_dataset,
    get_dataset_by_id,
    get_run,
    item_db_ids,
    load_items,
)

APP_BACKENDS = ("simulated", "openai", "anthropic")
DEFAULT_MODELS = {
    "simulated": "sim-primacy",
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-20241022",
}


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
        return None
    detail = ", ".join(f"{k}: {theirs.get(k)!r} -> {mine[k]!r}" for k in changed)
    return f"run {run.name!r} exists with other settings ({detail})"


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
            weights=dict(zip(("ws", "wB", "wv", "wu"), DEFAULT_WEIGHTS.as_tuple(), strict=True)),
            settings={"identity": spec.identity(), "ballpark_guard": spec.ballpark_guard},
        )
    conflict = settings_conflict(run, spec, session=session)
    if conflict:
        raise RunConflictError(
            f"{conflict}; use the same settings to resume it, or pick another name"
        )
    return run


def judge_run(
    spec: RunSpec, *, session: Session, progress: Progress | None = None
) -> tuple[Run, RunReport]:
    """Create or resume the run and make its missing calls.

    ``progress(done, total)`` is called after every answered call.

    Returns:
        The run, and what this invocation did.

    Raises:
        ValueError: no dataset of that name, or the protocol cannot run on its items.
        RunConflictError: a run of that name exists with other settings.
    """
    run = open_run(spec, session=session)
    session.commit()
    items = load_items(run.dataset_id, session=session)[: spec.limit]
    db_ids = item_db_ids(run.dataset_id, session=session)
    judge = make_judge(
        spec.backend, spec.model, base_url=spec.base_url, replay_path=spec.replay, seed=spec.seed
    )

    async def go() -> RunReport:
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
            )
        finally:
            if hasattr(judge, "aclose"):
                await judge.aclose()

    return run, asyncio.run(go())
