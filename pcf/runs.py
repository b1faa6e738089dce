"""Runs: create or resume one and make its calls, the paper's study and the demo, the runs
table, which backends can be used, and the cost estimate of a run before it starts.

The estimate plans the run's calls exactly as the runner does, leaves out the calls the run has
stored already and those the content-keyed cache would answer, and prices the rest: input tokens
are the rendered prompt's characters / 4, output tokens an assumed answer length per candidate.
APOCJudge's confirmation calls depend on answers, so they are counted as "up to" one per pair.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from sqlmodel import Session, col, select

from pcf.consensus import DEFAULT_WEIGHTS
from pcf.items import load_dataset
from pcf.judges import KEY_ENV, make_judge
from pcf.results import run_summary
from pcf.runner import Progress, RunConfig, RunReport, content_key, execute, plan
from pcf.settings import call_cost, price_table
from pcf.store.models import Call, Dataset, Run
from pcf.store.queries import (
    create_run,
    get_dataset,
    get_run,
    import_items,
    item_db_ids,
    list_runs,
    load_items,
)

DEMO_ITEMS = Path(__file__).resolve().parents[1] / "data" / "demo" / "items.jsonl"
DEMO_RUNS = (
    ("demo-direct", RunConfig(protocol="direct")),
    ("demo-pcf", RunConfig(protocol="pcf", k=7, executions=3)),
    ("demo-repeated", RunConfig(protocol="repeated", k=7)),
)


class RunConflictError(ValueError):
    """A run of that name exists with other settings."""


APP_BACKENDS = ("simulated", "openai", "anthropic")
DEFAULT_MODELS = {
    "simulated": "sim-primacy",
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-20241022",
}
CHARS_PER_TOKEN = 4
ANSWER_TOKENS_PER_CANDIDATE = 40
"""Assumed answer length: a score, a risk and a one- or two-sentence rationale per candidate."""
PAIRWISE_ANSWER_TOKENS = 60
CACHE_QUERY_CHUNK = 500
RUN_COLUMNS = (
    "run",
    "protocol",
    "judge",
    "K",
    "schedule",
    "executions",
    "status",
    "calls",
    "cache hits",
    "failures",
    "input tokens",
    "output tokens",
    "cost USD",
)


def runs_table(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per run with its settings, status, calls, failures, tokens and cost.

    ``judge`` is ``backend: model``.
    """
    return pd.DataFrame(
        [
            (
                r.name,
                r.protocol,
                f"{r.backend}: {r.model}",
                r.k,
                r.schedule,
                r.executions,
                r.status,
                r.calls_made,
                r.cache_hits,
                r.failures,
                r.input_tokens,
                r.output_tokens,
                r.cost_usd,
            )
            for r in runs
        ],
        columns=list(RUN_COLUMNS),
    )


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


@dataclass(frozen=True)
class CostEstimate:
    """What starting (or resuming) a run would do.

    Attributes:
        items: items the run covers.
        planned: calls of the run (items x K x executions; pairs: 2 per pair).
        stored: planned calls the run has already stored (a resumed run skips them).
        cached: calls the content-keyed cache would answer for free.
        to_call: calls sent to the judge (``planned - stored - cached``), retries not counted.
        confirmations_max: APOCJudge confirmation calls that may follow (0 for listwise).
        input_tokens: estimated input tokens of the calls sent.
        output_tokens: estimated output tokens of the calls sent.
        cost_usd: estimated cost, or None when the model has no price.
        resumes: the run exists and would be resumed.
        conflict: why the run of this name cannot be resumed with these settings, else None.
    """

    items: int
    planned: int
    stored: int
    cached: int
    to_call: int
    confirmations_max: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    resumes: bool
    conflict: str | None = None


def _cached_keys(keys: Sequence[str], *, session: Session) -> set[str]:
    """The content keys among ``keys`` that an ok call already answered."""
    found: set[str] = set()
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), CACHE_QUERY_CHUNK):
        chunk = unique[start : start + CACHE_QUERY_CHUNK]
        found |= set(
            session.exec(
                select(Call.content_key).where(col(Call.content_key).in_(chunk), col(Call.ok))
            ).all()
        )
    return found


def estimate_run(
    dataset: Dataset,
    *,
    session: Session,
    name: str,
    backend: str,
    model: str,
    config: RunConfig,
    base_url: str | None = None,
    limit: int | None = None,
    prices: dict[str, tuple[float, float]] | None = None,
) -> CostEstimate:
    """Estimate the calls, tokens and cost of running ``name`` with these settings.

    Raises:
        ValueError: the protocol cannot run on these items (e.g. APOCJudge on non-pairs).
    """
    items = load_items(dataset.id, session=session)[:limit]
    config = config.normalised()
    calls = plan(items, item_db_ids(dataset.id, session=session), config)
    run = get_run(name, session=session)
    stored: set[tuple[int, int, int]] = set()
    conflict = None
    if run is not None:
        conflict = settings_conflict(
            run,
            dataset,
            backend=backend,
            model=model,
            base_url=base_url,
            config=config,
            session=session,
        )
        stored = set(
            session.exec(
                select(Call.item_id, Call.execution, Call.call_index).where(Call.run_id == run.id)
            ).all()
        )
    todo = [c for c in calls if (c.item_db_id, c.execution, c.call_index) not in stored]
    rendered = [c.render() for c in todo]
    keys = [
        content_key(backend, model, r, config, c.repeat_index)
        for c, r in zip(todo, rendered, strict=True)
    ]
    cached = _cached_keys(keys, session=session)
    sent = [(c, r) for c, r, k in zip(todo, rendered, keys, strict=True) if k not in cached]
    input_tokens = sum(len(r.system + r.user) // CHARS_PER_TOKEN for _, r in sent)
    output_tokens = sum(
        PAIRWISE_ANSWER_TOKENS if c.pairwise else ANSWER_TOKENS_PER_CANDIDATE * len(c.order)
        for c, _ in sent
    )
    cost = call_cost(model, input_tokens, output_tokens, prices or price_table())
    return CostEstimate(
        items=len(items),
        planned=len(calls),
        stored=len(calls) - len(todo),
        cached=len(todo) - len(sent),
        to_call=len(sent),
        confirmations_max=len(items) if config.protocol == "apoc" else 0,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=0.0 if backend == "simulated" else cost,
        resumes=run is not None,
        conflict=conflict,
    )


def settings_conflict(
    run: Run,
    dataset: Dataset,
    *,
    backend: str,
    model: str,
    base_url: str | None,
    config: RunConfig,
    session: Session,
) -> str | None:
    """Why ``run`` cannot be resumed with these settings (what differs), or None when it can."""
    mine = {"dataset": dataset.name, "backend": backend, "model": model, "base_url": base_url}
    theirs_dataset = session.get(Dataset, run.dataset_id)
    theirs = {
        "dataset": theirs_dataset.name if theirs_dataset else None,
        "backend": run.backend,
        "model": run.model,
        "base_url": run.base_url,
    }
    mine |= config.normalised().identity()
    theirs |= run.settings.get("identity", {})
    changed = sorted(k for k in mine if mine[k] != theirs.get(k))
    if not changed:
        return None
    detail = ", ".join(f"{k}: {theirs.get(k)!r} -> {mine[k]!r}" for k in changed)
    return f"run {run.name!r} exists with other settings ({detail})"


def open_run(
    session: Session,
    dataset: Dataset,
    name: str,
    backend: str,
    model: str,
    base_url: str | None,
    config: RunConfig,
) -> Run:
    """The run called ``name``: created, or resumed when its settings are the same.

    Raises:
        RunConflictError: a run of that name exists with other settings.
    """
    identity = config.normalised().identity()
    run = get_run(name, session=session)
    if run is None:
        return create_run(
            name,
            session=session,
            dataset_id=dataset.id,
            protocol=config.protocol,
            backend=backend,
            model=model,
            k=config.normalised().k,
            schedule=config.normalised().schedule,
            seed=config.seed,
            executions=config.normalised().executions,
            base_url=base_url,
            weights=dict(zip(("ws", "wB", "wv", "wu"), DEFAULT_WEIGHTS.as_tuple(), strict=True)),
            settings={"identity": identity, "ballpark_guard": config.ballpark_guard},
        )
    conflict = settings_conflict(
        run,
        dataset,
        backend=backend,
        model=model,
        base_url=base_url,
        config=config,
        session=session,
    )
    if conflict:
        raise RunConflictError(
            f"{conflict}; use the same settings to resume it, or pick another name"
        )
    return run


def judge_dataset(
    session: Session,
    dataset: Dataset,
    *,
    name: str,
    backend: str,
    model: str,
    config: RunConfig,
    base_url: str | None = None,
    replay: Path | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
) -> dict:
    """Create or resume a run and make its missing calls; returns the run's summary.

    ``progress(done, total)`` is called after every answered call.

    Raises:
        RunConflictError: a run of that name exists with other settings.
    """
    items = load_items(dataset.id, session=session)[:limit]
    run = open_run(session, dataset, name, backend, model, base_url, config)
    session.commit()
    judge = make_judge(backend, model, base_url=base_url, replay_path=replay, seed=config.seed)
    db_ids = item_db_ids(dataset.id, session=session)

    async def go(progress: Progress | None) -> RunReport:
        try:
            return await execute(
                run,
                items,
                judge,
                config,
                session=session,
                db_ids=db_ids,
                prices=price_table(),
                progress=progress,
            )
        finally:
            if hasattr(judge, "aclose"):
                await judge.aclose()

    report = asyncio.run(go(progress))
    summary = run_summary(run, session=session)
    summary["this_invocation"] = {
        "planned": report.planned,
        "already_stored": report.already_done,
        "calls_made": report.calls_made,
        "cache_hits": report.cache_hits,
        "failures": report.failures,
        "errors": dict(report.errors),
        "input_tokens": report.input_tokens,
        "output_tokens": report.output_tokens,
        "cost_usd": round(report.cost_usd, 6),
        "unpriced_model": report.unpriced,
    }
    return summary


def default_run_name(dataset: str, backend: str, model: str, config: RunConfig) -> str:
    """A name that encodes the run's settings, so repeating a command resumes its run."""
    c = config.normalised()
    return f"{dataset}/{c.protocol}/{backend}/{model}/k{c.k}-{c.schedule}-x{c.executions}-s{c.seed}"


def study_plan(
    items_are_pairs: bool, k: int, executions: int, **common: Any
) -> list[tuple[str, RunConfig]]:
    """The paper's protocol: direct, PCF and repeated canonical; APOCJudge for pairs.

    K=3 and 5 come from prefixes of the K=7 runs, at no extra cost. ``common`` holds the
    settings every run shares (seed, temperature, concurrency).
    """
    if items_are_pairs:
        return [("apoc", RunConfig(protocol="apoc", **common))]
    return [
        ("direct", RunConfig(protocol="direct", **common)),
        ("pcf", RunConfig(protocol="pcf", k=k, executions=executions, **common)),
        ("repeated", RunConfig(protocol="repeated", k=k, **common)),
    ]


def study_runs(name: str, session: Session) -> list[Run]:
    """The runs of study ``name`` (named ``NAME/direct``, ``NAME/pcf``...)."""
    return [r for r in list_runs(session=session) if r.name.startswith(f"{name}/")]


def build_demo(session: Session) -> list[dict]:
    """Import the demo items as dataset ``demo`` and run the simulated demo runs."""
    dataset = get_dataset("demo", session=session)
    if dataset is None:
        items = load_dataset("jsonl", DEMO_ITEMS)
        dataset = import_items(
            items, session=session, name="demo", fmt="jsonl", source_path=DEMO_ITEMS
        )
        session.commit()
    return [
        judge_dataset(
            session, dataset, name=name, backend="simulated", model="sim-primacy", config=config
        )
        for name, config in DEMO_RUNS
    ]
