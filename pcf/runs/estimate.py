"""The cost estimate of a run before it starts.

The estimate plans the run's calls exactly as the engine does, leaves out the calls the run has
stored already and those the content-keyed cache would answer, and prices the rest: input tokens
are the rendered prompt's characters / 4, output tokens an assumed answer length per candidate.
APOCJudge's confirmation calls depend on answers, so they are counted as "up to" one per pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from pcf.prices import batch_prices, call_cost, price_table
from pcf.runs.engine import content_key, plan
from pcf.runs.manage import require_dataset, settings_conflict
from pcf.runs.spec import RunSpec
from pcf.store.queries import answered_keys, get_run, item_db_ids, load_items, run_calls_by_slot

CHARS_PER_TOKEN = 4
ANSWER_TOKENS_PER_CANDIDATE = 40
"""Assumed answer length: a score, a risk and a one- or two-sentence rationale per candidate."""
PAIRWISE_ANSWER_TOKENS = 60
BATCH_BACKENDS = ("openai", "anthropic")


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
        batch_cost_usd: the same calls sent with ``--batch`` (the providers' batch price), or
            None when the model has no price or the backend no batch API.
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
    batch_cost_usd: float | None = None
    conflict: str | None = None


def estimate_run(
    spec: RunSpec, *, session: Session, prices: dict[str, tuple[float, float]] | None = None
) -> CostEstimate:
    """Estimate the calls, tokens and cost of running ``spec``.

    Raises:
        ValueError: no dataset of that name, or the protocol cannot run on its items (e.g.
            APOCJudge on non-pairs).
    """
    dataset = require_dataset(spec, session=session)
    items = load_items(dataset.id, session=session)[: spec.limit]
    calls = plan(items, item_db_ids(dataset.id, session=session), spec, dataset_seed=dataset.seed)
    run = get_run(spec.run_name, session=session)
    stored = {} if run is None else run_calls_by_slot(run.id, session=session)
    conflict = None if run is None else settings_conflict(run, spec, session=session)
    todo = [c for c in calls if (c.item_db_id, c.execution, c.call_index) not in stored]
    rendered = [c.render() for c in todo]
    keys = [
        content_key(spec.backend, spec.model, r, spec, c.repeat_index)
        for c, r in zip(todo, rendered, strict=True)
    ]
    cached = answered_keys(keys, session=session)
    sent = [(c, r) for c, r, k in zip(todo, rendered, keys, strict=True) if k not in cached]
    input_tokens = sum(len(r.system + r.user) // CHARS_PER_TOKEN for _, r in sent)
    output_tokens = sum(
        PAIRWISE_ANSWER_TOKENS if c.pairwise else ANSWER_TOKENS_PER_CANDIDATE * len(c.order)
        for c, _ in sent
    )
    prices = prices or price_table()
    cost = call_cost(spec.model, input_tokens, output_tokens, prices)
    batch_cost = call_cost(spec.model, input_tokens, output_tokens, batch_prices(prices))
    return CostEstimate(
        items=len(items),
        planned=len(calls),
        stored=len(calls) - len(todo),
        cached=len(todo) - len(sent),
        to_call=len(sent),
        confirmations_max=len(items) if spec.protocol == "apoc" else 0,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=0.0 if spec.backend == "simulated" else cost,
        resumes=run is not None,
        conflict=conflict,
        batch_cost_usd=batch_cost if spec.backend in BATCH_BACKENDS else None,
    )
