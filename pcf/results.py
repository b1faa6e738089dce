"""Decisions and accuracy of stored runs, recomputed from their calls (never stored)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, select

from pcf.consensus import DEFAULT_WEIGHTS, Weights
from pcf.decisions import aggregate
from pcf.evaluation import compare_paired
from pcf.items import Item
from pcf.pairwise import TIE, bucket_scores, official_outcome
from pcf.runner import apoc_verdicts
from pcf.store.models import Call, Run
from pcf.store.queries import item_db_ids, load_items, run_judgments

SIMULATED_NOTE = "results illustrate the tool, not the method's accuracy"
SIMULATED_LABEL = f"simulated judge: {SIMULATED_NOTE}"


def is_simulated(run: Run) -> bool:
    """Whether a run's answers came from the simulated backend."""
    return run.backend == "simulated"


def run_decisions(
    run: Run,
    *,
    session: Session,
    items: Sequence[Item] | None = None,
    weights: Weights = DEFAULT_WEIGHTS,
    k: int | None = None,
    executions: int | None = None,
    rule: str = "eq5",
) -> list[dict[str, Any]]:
    """``decisions.jsonl`` records of a run, in item order.

    For APOCJudge runs, ``winner`` is the final verdict (null for a tie or no verdict) and
    ``metrics`` holds the direct verdict, the APOC reason and JudgeBench's official outcome.
    """
    items = list(items) if items is not None else load_items(run.dataset_id, session=session)
    if run.protocol == "apoc":
        return _apoc_decisions(run, items, session=session)
    return aggregate(
        run_judgments(run.id, session=session),
        items=items,
        weights=weights,
        k=k,
        executions=executions,
        rule=rule,
    )


def _apoc_decisions(run: Run, items: list[Item], *, session: Session) -> list[dict[str, Any]]:
    calls = session.exec(select(Call).where(Call.run_id == run.id)).all()
    db_ids = item_db_ids(run.dataset_id, session=session)
    guard = bool(run.settings.get("ballpark_guard", True))
    verdicts = apoc_verdicts(calls, items, db_ids, guard=guard)
    by_item: dict[int, dict[int, Call]] = {}
    for c in calls:
        by_item.setdefault(c.item_id, {})[c.call_index] = c
    out = []
    for item in items:
        mine = by_item.get(db_ids[item.item_id], {})
        if not mine:
            continue
        decision = verdicts[item.item_id]
        swapped = (mine[1].judgment or {}).get("verdict") if 1 in mine and mine[1].ok else None
        outcome = None
        if item.gold is not None:
            other = next(c for c in item.candidate_ids if c != item.gold)
            outcome = official_outcome(item.gold, other, decision.direct, swapped)
        flags = []
        if decision.override_proposed:
            flags.append("order_unstable")
        if decision.verdict != decision.direct:
            flags.append("overrides_direct")
        if any(not c.ok for c in mine.values()):
            flags.append("incomplete")
        out.append(
            {
                "item_id": item.item_id,
                "winner": None if decision.verdict in (None, TIE) else decision.verdict,
                "consensus": {},
                "flags": flags,
                "metrics": {
                    "direct_winner": None if decision.direct in (None, TIE) else decision.direct,
                    "verdict": decision.verdict,
                    "direct_verdict": decision.direct,
                    "swapped_verdict": swapped,
                    "override_proposed": decision.override_proposed,
                    "override_accepted": decision.override_accepted,
                    "reason": decision.reason,
                    "official_outcome": outcome,
                    "n_calls": len(mine),
                    "n_ok": sum(c.ok for c in mine.values()),
                },
            }
        )
    return out


def run_summary(run: Run, *, session: Session, seed: int = 0) -> dict[str, Any]:
    """Counts and, where gold labels exist, accuracy of a run against its direct baseline."""
    items = load_items(run.dataset_id, session=session)
    decisions = run_decisions(run, session=session, items=items)
    gold = {i.item_id: i.gold for i in items}
    summary: dict[str, Any] = {
        "run": run.name,
        "protocol": run.protocol,
        "backend": run.backend,
        "model": run.model,
        "simulated": is_simulated(run),
        "items": len(decisions),
        "calls_made": run.calls_made,
        "cache_hits": run.cache_hits,
        "failures": run.failures,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cost_usd": round(run.cost_usd, 6),
        "flagged": {
            flag: sum(flag in d["flags"] for d in decisions)
            for flag in (
                "order_unstable",
                "overrides_direct",
                "near_tie",
                "position_driven",
                "incomplete",
            )
        },
    }
    if is_simulated(run):
        summary["note"] = SIMULATED_LABEL
    labelled = [d for d in decisions if gold.get(d["item_id"]) is not None]
    if labelled:
        stats = compare_paired(
            [gold[d["item_id"]] for d in labelled],
            [d["metrics"]["direct_winner"] for d in labelled],
            [d["winner"] for d in labelled],
            seed=seed,
        )
        summary["accuracy"] = stats
    if run.protocol == "apoc":
        outcomes = [d["metrics"]["official_outcome"] for d in labelled]
        buckets = [
            next(i.bucket or "all" for i in items if i.item_id == d["item_id"]) for d in labelled
        ]
        if outcomes:
            summary["judgebench_official"] = bucket_scores(outcomes, buckets)
        summary["overrides"] = {
            "proposed": sum(d["metrics"]["override_proposed"] for d in decisions),
            "accepted": sum(d["metrics"]["override_accepted"] for d in decisions),
        }
    return summary
