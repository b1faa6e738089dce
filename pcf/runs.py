"""Runs as the app shows and plans them: the runs table, which backends can be used, and the
cost estimate of a run before it starts.

The estimate plans the run's calls exactly as the runner does, leaves out the calls the run has
stored already and those the content-keyed cache would answer, and prices the rest: input tokens
are the rendered prompt's characters / 4, output tokens an assumed answer length per candidate.
APOCJudge's confirmation calls depend on answers, so they are counted as "up to" one per pair.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from sqlmodel import Session, col, select

from pcf.cli import settings_conflict
from pcf.judges import KEY_ENV
from pcf.runner import RunConfig, content_key, plan
from pcf.settings import call_cost, price_table
from pcf.store.models import Call, Dataset, Run
from pcf.store.queries import get_run, item_db_ids, load_items

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
