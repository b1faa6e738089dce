"""The cost estimate of a run before it starts, and the checks a run passes before it is planned.

The estimate plans the run's calls as the engine does, leaves out those stored or cached, and
prices the rest: input tokens are the prompt's characters / 4, output tokens an assumed answer
length per candidate; APOCJudge's confirmations are counted as "up to" one per pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlmodel import Session

from pcf.prices import batch_prices, call_cost, price_table
from pcf.runs.adaptive import (
    calibration_keys,
    executions_for,
    item_plans,
    item_state,
    item_step,
    policy_of,
)
from pcf.runs.call_plan import PlannedCall, content_key, in_chunks, plan
from pcf.runs.spec import RunSpec
from pcf.stopping import STOPPING_VERSION
from pcf.store import (
    Dataset,
    DatasetItems,
    Run,
    answered_keys,
    get_dataset,
    get_run,
    item_calls,
    item_db_ids,
    run_calls_by_slot,
    run_dataset,
)

CHARS_PER_TOKEN = 4
ANSWER_TOKENS_PER_CANDIDATE = 40
"""Assumed answer length: a score, a risk and a one- or two-sentence rationale per candidate."""
PAIRWISE_ANSWER_TOKENS = 60
BATCH_BACKENDS = ("openai", "anthropic")


@dataclass(frozen=True)
class CostEstimate:
    """What starting (or resuming) a run would do: ``to_call`` is ``planned - stored - cached``; a
    cost is None (unpriced, never 0) when the model has no price (``batch_cost_usd`` also
    without a batch API for the backend)."""

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
    batch_cost_usd: float | None = None
    conflict: str | None = None


def estimate_run(
    spec: RunSpec, *, session: Session, prices: dict[str, tuple[float, float]] | None = None
) -> CostEstimate:
    """Estimate the calls, tokens and cost of running ``spec``."""
    dataset = dataset_of(spec, session=session)
    db_ids = item_db_ids(dataset.id, session=session)
    run = get_run(spec.run_name, session=session)
    conflict = None if run is None else settings_conflict(run, spec, session=session)
    prices = prices or price_table()
    items = planned = to_do = 0
    totals = np.zeros(3, dtype=int)
    for chunk in in_chunks(DatasetItems(dataset.id, session=session, limit=spec.limit)):
        calls = plan(chunk, db_ids, spec, dataset_seed=dataset.seed)
        ids = [db_ids[item.item_id] for item in chunk]
        stored = {} if run is None else run_calls_by_slot(run.id, session=session, item_ids=ids)
        todo = [c for c in calls if c.slot not in stored]
        totals += _unanswered(spec, todo, session=session)
        items, planned, to_do = items + len(chunk), planned + len(calls), to_do + len(todo)
    to_call, input_tokens, output_tokens = (int(n) for n in totals)
    cost, batch_cost = _costs(spec, input_tokens, output_tokens, prices)
    return CostEstimate(
        items=items,
        planned=planned,
        stored=planned - to_do,
        cached=to_do - to_call,
        to_call=to_call,
        confirmations_max=items if spec.protocol == "apoc" else 0,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost,
        resumes=run is not None,
        conflict=conflict,
        batch_cost_usd=batch_cost,
    )


def _unanswered(
    spec: RunSpec, calls: Sequence[PlannedCall], *, session: Session
) -> tuple[int, int, int]:
    """How many of ``calls`` the cache would not answer, and their estimated tokens in and out."""
    rendered = [c.render(structured=spec.structured_output) for c in calls]
    keys = [
        content_key(spec.backend, spec.model, r, spec, c.repeat_index)
        for c, r in zip(calls, rendered, strict=True)
    ]
    cached = answered_keys(keys, session=session)
    sent = [(c, r) for c, r, k in zip(calls, rendered, keys, strict=True) if k not in cached]
    input_tokens = sum(len(r.system + r.user) // CHARS_PER_TOKEN for _, r in sent)
    output_tokens = sum(
        PAIRWISE_ANSWER_TOKENS if c.pairwise else ANSWER_TOKENS_PER_CANDIDATE * len(c.order)
        for c, _ in sent
    )
    return len(sent), input_tokens, output_tokens


def _costs(
    spec: RunSpec, input_tokens: int, output_tokens: int, prices: dict[str, tuple[float, float]]
) -> tuple[float | None, float | None]:
    """The tokens' cost, and at the batch price (None: no price, or no batch API)."""
    cost = call_cost(spec.model, input_tokens, output_tokens, prices)
    batch_cost = call_cost(spec.model, input_tokens, output_tokens, batch_prices(prices))
    return (
        0.0 if spec.backend == "simulated" else cost,
        batch_cost if spec.backend in BATCH_BACKENDS else None,
    )


@dataclass(frozen=True)
class ReopenEstimate:
    """What asking today's stopping policy again about an adaptive run's stopped items costs:
    of the ``items`` another policy version stopped, those ``reopened``, and their calls."""

    versions: tuple[list[int], int]
    items: int
    reopened: int
    min_calls: int
    max_calls: int
    max_cost_usd: float | None

    def as_dict(self) -> dict[str, object]:
        """The estimate as printed by ``pcf judge``."""
        recorded, today = self.versions
        return {
            "stopped_by_versions": recorded,
            "current_version": today,
            "items_stopped_by_other_versions": self.items,
            "items_reopened": self.reopened,
            "calls_at_least": self.min_calls,
            "calls_at_most": self.max_calls,
            "cost_usd_at_most": self.max_cost_usd,
        }


def reopen_estimate(spec: RunSpec, *, session: Session) -> ReopenEstimate | None:
    """What ``pcf judge --recheck-stops`` would cost on the adaptive run ``spec`` names (the
    uncalibrated policy asked), or None when no stop of that run is another version's."""
    run = get_run(spec.run_name, session=session)
    if run is None or spec.adaptive == "off":
        return None
    versions = {key: stop.version for key, stop in run.settings.stops.items()}
    older = {key for key, version in versions.items() if version != STOPPING_VERSION}
    if not older:
        return None
    dataset = run_dataset(run, session=session)
    items = DatasetItems(run.dataset_id, session=session, limit=spec.limit)
    db_ids = item_db_ids(run.dataset_id, session=session)
    spec_plan = executions_for(spec, items)
    policy = policy_of(spec)
    sample = calibration_keys(spec, [item.item_id for item in items])
    prices = price_table()
    reopened = max_calls = 0
    tokens = np.zeros(3, dtype=int)
    for chunk in in_chunks(items):
        planned = plan(chunk, db_ids, spec_plan, dataset_seed=dataset.seed)
        left_calls: list[PlannedCall] = []
        for item_plan in item_plans(planned, spec):
            first = item_plan.calls[0]
            if first.item.item_id not in older:
                continue
            stored = item_calls(run.id, first.item_db_id, session=session)
            if item_step(item_plan, stored, policy, full=first.item.item_id in sample)[1] is None:
                reopened += 1
                left_calls += item_state(item_plan, stored)[1]
        max_calls += len(left_calls)
        tokens += _unanswered(spec, left_calls, session=session)
    return ReopenEstimate(
        versions=(sorted(set(versions.values())), STOPPING_VERSION),
        items=len(older),
        reopened=reopened,
        min_calls=reopened,
        max_calls=max_calls,
        max_cost_usd=_costs(spec, int(tokens[1]), int(tokens[2]), prices)[0],
    )


def dataset_of(spec: RunSpec, *, session: Session) -> Dataset:
    """The dataset the run judges, or a ValueError that says how to import one."""
    dataset = get_dataset(spec.dataset, session=session)
    if dataset is None:
        raise ValueError(f"no dataset {spec.dataset!r}; import one with `pcf import`")
    return dataset


def settings_conflict(run: Run, spec: RunSpec, *, session: Session) -> str | None:
    """Why ``run`` cannot be resumed as ``spec`` (what differs), or None when it can."""
    dataset = session.get(Dataset, run.dataset_id)
    judge = ("backend", "model", "base_url")
    mine = {"dataset": spec.dataset} | {k: getattr(spec, k) for k in judge}
    mine |= spec.identity().stored()
    theirs = {"dataset": dataset.name if dataset else None}
    theirs |= {k: getattr(run, k) for k in judge} | run.settings.identity.stored()

    changed = sorted(k for k in mine if mine[k] != theirs.get(k))
    if changed:
        detail = ", ".join(f"{k}: {theirs.get(k)!r} -> {mine[k]!r}" for k in changed)
        return f"run {run.name!r} exists with other settings ({detail})"
    # A run planned before canonical orders followed the dataset seed took them from its own.
    if run.settings.plans_from_dataset_seed or dataset is None or run.seed == dataset.seed:
        return None
    return (
        f"run {run.name!r} was planned with canonical orders from its own seed {run.seed}, "
        f"but they now come from the dataset's seed {dataset.seed}"
    )
