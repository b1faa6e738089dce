"""A stored run's results: decisions of every item, flags and slot bias, accuracy against gold
or human labels, and the run's summary, all computed from its calls; the decision table is also
kept in the database per revision of the calls (:func:`stored_analysis`), for the pages."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
from sqlmodel import Session

from pcf.analysis.stored import arrow_frame, kept
from pcf.consensus import pack
from pcf.decisions import aggregate, decide
from pcf.evaluation import compare_paired
from pcf.flags import FLAG_HELP, FLAGS
from pcf.instability import SlotCounts, slot_counts
from pcf.items import Item
from pcf.judges import judge_label
from pcf.judges.base import UNKNOWN
from pcf.judges.simulated import MODEL_SLOT_BIAS
from pcf.pairwise import apoc_decide, bucket_scores, is_ballpark_question, official_outcome
from pcf.prices import UNPRICED, price_table, run_cost, shown_cost
from pcf.prompts import TIE
from pcf.store import (
    ITEM_CHUNK,
    Call,
    Run,
    item_db_ids,
    items_at,
    list_runs,
    load_items,
    run_calls,
    run_dataset,
    run_judgments,
    run_listing,
)
from pcf.weights import Weights, weights_label

SIMULATED_NOTE = "results illustrate the tool, not the method's accuracy"
SIMULATED_LABEL = f"simulated judge: {SIMULATED_NOTE}"
ITEM_METRICS = ("priority", "top_agreement", "top_entropy", "kendall_w", "margin")
"""An item's numbers in the table: NaN when unknown."""
TABLE_SCHEMA = pa.schema(
    [
        *(("item_id", pa.string()), ("db_id", pa.int64()), ("position", pa.int64())),
        *(("bucket", pa.string()), ("gold", pa.string()), ("candidate_ids", pa.list_(pa.string()))),
        *(("winner", pa.string()), ("direct_winner", pa.string())),
        *((name, pa.float64()) for name in ITEM_METRICS),
        *(("n_ok", pa.int64()), ("n_calls", pa.int64()), ("flags", pa.string())),
        *((flag, pa.bool_()) for flag in FLAGS),
    ]
)
"""The decision table's columns, as Arrow holds them while a run is decided and stored."""
TABLE_COLUMNS = tuple(TABLE_SCHEMA.names)


ADAPTIVE_NOTE = (
    "its items stopped once their winner under these weights was settled, each after its own "
    "number of calls, so its decisions use these weights over every call made, and the K and "
    "weight tables leave it out (the first K calls of a stopped item, or other weights, can "
    "show winners its full run would not)"
)


def run_listing_priced(*, session: Session, dataset_id: int | None = None) -> list[dict[str, Any]]:
    """:func:`pcf.store.run_listing` with each run's ``cost_usd`` None where its model has no
    price (:func:`run_cost`)."""
    prices = price_table()
    runs = {run.name: run for run in list_runs(session=session, dataset_id=dataset_id)}
    return [
        row | {"cost_usd": run_cost(runs[row["name"]], prices)}
        for row in run_listing(session=session, dataset_id=dataset_id)
    ]


def is_simulated(run: Run) -> bool:
    """Whether a run's answers came from the simulated judge: its backend, or the recording a
    replay run answered from."""
    return run.settings.is_simulated(run.backend)


def simulates_strong_bias(run: Run) -> bool:
    """Whether a run's simulated judge has a strong position bias (the demo's run where the
    orderings visibly change the verdicts)."""
    return is_simulated(run) and run.model in MODEL_SLOT_BIAS


def run_judge(run: Run) -> str:
    """The run's judge as every description of the run names it: ``openai/gpt-4o-mini``,
    ``ollama/llama3.1 at http://localhost:11434/v1`` (:func:`~pcf.judges.judge_label`)."""
    return judge_label(run.backend, run.model, run.base_url)


def usage(run: Run) -> dict[str, int | str]:
    """A run's attempts (requests sent, retries included), cache hits, failures and tokens, as
    its summary and report name them; tokens read ``unknown`` once a server answered the run
    without reporting them."""
    fields = ("cache_hits", "failures", "input_tokens", "output_tokens")
    counts: dict[str, int | str] = {"attempts": run.calls_made}
    counts |= {name: getattr(run, name) for name in fields}
    if unknown := run.settings.usage:
        counts |= {"input_tokens": UNKNOWN, "output_tokens": UNKNOWN}
        counts["answers_without_usage"] = unknown
    return counts


def is_adaptive(run: Run) -> bool:
    """Whether a run stopped its items adaptively (``pcf judge --adaptive``)."""
    return run.settings.is_adaptive


def run_weights(run: Run) -> Weights:
    """The weights a run is decided with: those an adaptive run stopped on, else the proposed."""
    return run.settings.identity.weights


def stopping_label(run: Run) -> str | None:
    """``confident R=0.01 on proposed``: an adaptive run's policy and weights, else None."""
    if not is_adaptive(run):
        return None
    identity = run.settings.identity
    policy = identity.adaptive
    if policy == "confident":
        policy += f" R={0.01 if identity.risk is None else identity.risk:g}"
    return f"{policy} on {weights_label(run_weights(run))}"


def stopping_summary(run: Run) -> dict[str, Any] | None:
    """An adaptive run's stopping: policy, risk, weights, max calls, the policy versions its
    stops were made with, how many items stopped for each reason and a ``confident`` run's
    calibration; None for a full run."""
    if not is_adaptive(run):
        return None
    identity, stopping = run.settings.identity, run.settings.stopping
    return {
        "policy": identity.adaptive,
        "risk": identity.risk,
        "stop_on": weights_label(run_weights(run)),
        "max_calls": identity.max_calls,
        "versions": stopping.versions if stopping else [],
        "stop_reasons": dict(Counter(stop.reason for stop in run.settings.stops.values())),
        "calibration": stopping.calibration if stopping else None,
        "note": f"adaptive run: {ADAPTIVE_NOTE}",
    }


def run_decisions(
    run: Run, *, session: Session, items: Sequence[Item] | None = None
) -> list[dict[str, Any]]:
    """``decisions.jsonl`` records of a run, in item order, under :func:`run_weights`.

    For APOCJudge runs, ``winner`` is the final verdict (null for a tie or no verdict) and
    ``metrics`` holds the direct verdict, the APOC reason and JudgeBench's official outcome.
    """
    return _decisions(run, items or load_items(run.dataset_id, session=session), session=session)


def decision_chunks(
    run: Run, *, session: Session, size: int = ITEM_CHUNK, start: int = 0
) -> Iterator[list[dict[str, Any]]]:
    """:func:`run_decisions`, ``size`` items at a time (an item's decision depends on its calls
    alone) from the item at position ``start``: the same records in the same order, with
    memory for one chunk, each with the item's ``gold`` and whether the winner is it
    (``correct``), both None for an item without gold."""
    for first, stop, items in item_chunks(run, session=session, size=size, start=start):
        gold = {item.item_id: item.gold for item in items}
        yield [
            record | _gold_fields(record, gold.get(record["item_id"]))
            for record in _decisions(run, items, session=session, start=first, stop=stop)
        ]


def _gold_fields(record: dict[str, Any], gold: str | None) -> dict[str, Any]:
    """``gold`` and ``correct`` (the record's winner is the gold; None without gold)."""
    return {"gold": gold, "correct": None if gold is None else record.get("winner") == gold}


def item_chunks(
    run: Run, *, session: Session, size: int, start: int = 0
) -> Iterator[tuple[int, int, list[Item]]]:
    """The run's items ``size`` at a time from position ``start``, without their candidates'
    texts: each chunk's first position, the position after its end, and its items."""
    for first in range(start, run_dataset(run, session=session).n_items, size):
        stop = first + size
        yield first, stop, items_at(run.dataset_id, first, stop, session=session, texts=False)


def _decisions(
    run: Run,
    items: Sequence[Item],
    *,
    session: Session,
    start: int | None = None,
    stop: int | None = None,
) -> list[dict[str, Any]]:
    """Decision records of ``items`` from the run's calls (of the items at positions ``start``
    to ``stop`` alone, when given)."""
    if run.protocol == "apoc":
        calls = run_calls(run.id, session=session, start=start, stop=stop)
        return _apoc_decisions(run, items, calls)
    judgments = run_judgments(run.id, session=session, start=start, stop=stop)
    return aggregate(judgments, items=items, weights=run_weights(run))


def judgment_records(
    run: Run, *, session: Session, start: int | None = None, stop: int | None = None
) -> list[dict[str, Any]]:
    """A run's calls as ``judgments.jsonl`` records, in item order, each with what made it
    (``backend`` and ``simulated``); only those of the items at positions ``start`` to
    ``stop`` (excluded) when given. An APOCJudge call's record carries its pairwise verdict (a
    candidate id, ``tie``, or null when failed), confidence and slot keys instead of scores."""
    made_by = {"backend": run.backend, "simulated": is_simulated(run)}
    if run.protocol != "apoc":
        judgments = run_judgments(run.id, session=session, start=start, stop=stop)
        return [j.to_dict() | made_by for j in judgments]
    if start is None or stop is None:
        key_of = {db_id: key for key, db_id in item_db_ids(run.dataset_id, session=session).items()}
    else:
        items = items_at(run.dataset_id, start, stop, session=session, texts=False)
        key_of = {item.metadata["db_id"]: item.item_id for item in items}
    return [
        {
            "item_id": key_of[call.item_id],
            "execution": call.execution,
            "call_index": call.call_index,
            "order": list(call.order),
            "keys": list(call.keys),
            "ok": call.ok,
            "error": call.error,
            "verdict": call.verdict(),
            "confidence": (call.judgment or {}).get("confidence") if call.ok else None,
        }
        | made_by
        for call in run_calls(run.id, session=session, start=start, stop=stop)
    ]


def judgment_chunks(
    run: Run, *, session: Session, size: int = ITEM_CHUNK
) -> Iterator[list[dict[str, Any]]]:
    """:func:`judgment_records` of the whole run, ``size`` items at a time (the same records in
    the same order; memory holds one chunk)."""
    for start in range(0, run_dataset(run, session=session).n_items, size):
        yield judgment_records(run, session=session, start=start, stop=start + size)


def _apoc_decisions(run: Run, items: Sequence[Item], calls: Sequence[Call]) -> list[dict[str, Any]]:
    """APOCJudge records of ``items`` (with their ``db_id``) from their ``calls``."""
    guard = run.settings.ballpark_guard
    by_item: dict[int, dict[int, Call]] = {}
    for c in calls:
        by_item.setdefault(c.item_id, {})[c.call_index] = c
    out = []
    for item in items:
        mine = by_item.get(item.metadata["db_id"], {})
        if not mine:
            continue
        direct, swapped, confirmed = (mine[i].verdict() if i in mine else None for i in range(3))
        ballpark = is_ballpark_question(item.prompt)
        decision = apoc_decide(direct, swapped, confirmed, ballpark=ballpark, guard=guard)
        outcome = None
        if item.gold is not None:
            other = next(c for c in item.candidate_ids if c != item.gold)
            outcome = official_outcome(item.gold, other, decision.direct, swapped)
        raised = {
            "order_unstable": decision.override_proposed,
            "overrides_direct": decision.verdict != decision.direct,
            "incomplete": any(not c.ok for c in mine.values()),
        }
        out.append(
            {
                "item_id": item.item_id,
                "winner": None if decision.verdict in (None, TIE) else decision.verdict,
                "consensus": {},
                "flags": [flag for flag, up in raised.items() if up],
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


def run_summary(run: Run, *, session: Session, size: int = ITEM_CHUNK) -> dict[str, Any]:
    """Counts and, where gold labels exist, accuracy of a run against its direct baseline,
    decided ``size`` items at a time (as :func:`decision_chunks` does)."""
    decided = stored_calls = 0
    flagged = dict.fromkeys(FLAGS, 0)
    overrides = {"proposed": 0, "accepted": 0}
    labelled: list[tuple[Any, ...]] = []  # gold, direct and PCF winners, outcome, bucket
    for start, stop, items in item_chunks(run, session=session, size=size):
        by_id = {item.item_id: item for item in items}
        for record in _decisions(run, items, session=session, start=start, stop=stop):
            metrics = record["metrics"]
            decided += 1
            stored_calls += metrics.get("n_calls", 0)
            for flag in record["flags"]:
                flagged[flag] += 1
            if run.protocol == "apoc":
                overrides["proposed"] += metrics["override_proposed"]
                overrides["accepted"] += metrics["override_accepted"]
            item = by_id[record["item_id"]]
            if item.gold is not None:
                picked = (metrics["direct_winner"], record["winner"])
                outcome = metrics.get("official_outcome")
                labelled.append((item.gold, *picked, outcome, item.bucket or "all"))
    cost, unknown_usage = run_cost(run), run.settings.usage > 0

    def cost_per(count: int) -> float | str:
        if unknown_usage:
            return UNKNOWN
        if cost is None:
            return UNPRICED
        return cost / count if count > 0 else 0.0

    summary: dict[str, Any] = {
        "run": run.name,
        "protocol": run.protocol,
        "backend": run.backend,
        "model": run.model,
        "judge": run_judge(run),
        "simulated": is_simulated(run),
        "items": decided,
        **usage(run),
        "cost_usd": UNKNOWN if unknown_usage else shown_cost(cost),
        "flagged": flagged,
    }
    if decided:  # beside the direct judge's one call, priced at this run's mean paid call
        paid = stored_calls - run.cache_hits  # none: simulated or cached (cost 0)
        summary["per_item"] = {
            "calls": stored_calls / decided,
            "direct_calls": 1.0,
            "cost_usd": cost_per(decided),
            "direct_cost_usd": cost_per(paid),
        }
    if stopping := stopping_summary(run):
        summary["stopping"] = stopping
    if is_simulated(run):
        summary["note"] = SIMULATED_LABEL
    if labelled:
        gold, direct, winners, outcomes, buckets = zip(*labelled, strict=True)
        summary["accuracy"] = compare_paired(gold, direct, winners)
    if run.protocol == "apoc":
        if labelled:
            summary["judgebench_official"] = bucket_scores(outcomes, buckets)
        summary["overrides"] = overrides
    return summary


@dataclass(frozen=True)
class RunAnalysis:
    """What the pages need of a whole run: the decision ``table`` (:data:`TABLE_COLUMNS`, one
    row per decided item in item order), ``slot_bias`` per candidate count and slot, and
    ``slot_tests`` per candidate count (the chi-square test of top picks against uniform)."""

    table: pd.DataFrame
    slot_bias: pd.DataFrame
    slot_tests: pd.DataFrame


def analyse_run(run: Run, *, session: Session, chunk: int = ITEM_CHUNK) -> RunAnalysis:
    """Decisions (under :func:`run_weights`), flags and slot bias of every item of a run, from
    its stored calls, ``chunk`` items at a time (:func:`analysis_parts`)."""
    parts = analysis_parts(run, session=session, chunk=chunk)
    return RunAnalysis(arrow_frame(parts["table"]), parts["slot_bias"], parts["slot_tests"])


def analysis_parts(run: Run, *, session: Session, chunk: int = ITEM_CHUNK) -> dict[str, Any]:
    """:func:`analyse_run`'s parts, the decision table as Arrow: slot counts add up over the
    chunks, and each chunk's rows become compact Arrow columns at once, so that a large run's
    table is never held as Python rows or frames. APOCJudge runs have no slot-bias rows."""
    tables: list[pa.Table] = []
    counts: dict[int, SlotCounts] = {}
    for start, stop, items in item_chunks(run, session=session, size=chunk):
        if run.protocol == "apoc":
            calls = run_calls(run.id, session=session, start=start, stop=stop)
            tables.append(table_chunk(table_rows(_apoc_decisions(run, items, calls), items, start)))
            continue
        by_id = {item.item_id: item for item in items}
        records: dict[str, dict[str, Any]] = {}
        judgments = run_judgments(run.id, session=session, start=start, stop=stop)
        for group in pack(judgments, {item.item_id: item.candidate_ids for item in items}):
            for record in decide(group, weights=run_weights(run)).records():
                records[record["item_id"]] = record
            found = slot_counts(group, [by_id[i].gold for i in group.item_ids])
            counts[group.n] = counts[group.n] + found if group.n in counts else found
        decided = [records[i.item_id] for i in items if i.item_id in records]
        tables.append(table_chunk(table_rows(decided, items, start)))
    biases = [counts[n].bias() for n in sorted(counts)]
    slots = [
        (b.n, s + 1, float(b.top_share[s]), int(b.top_counts[s]), float(b.gold_recall[s]))
        for b in biases
        for s in range(b.n)
    ]
    tests = [(b.n, int(b.top_counts.sum()), b.chi2, b.p_value) for b in biases]
    return {
        "table": pa.concat_tables(tables or [table_chunk([])]),
        "slot_bias": pd.DataFrame(
            slots, columns=["n", "slot", "top_share", "top_count", "gold_recall"]
        ),
        "slot_tests": pd.DataFrame(tests, columns=["n", "calls", "chi2", "p_value"]),
    }


def stored_analysis(run: Run, *, session: Session) -> RunAnalysis:
    """:func:`analyse_run`, kept in the database for the revision of the run's calls: computed
    once (and again after any call changes), then read (:func:`pcf.analysis.stored.kept`).
    Flushes what it stores; the caller commits."""
    parts = kept(run, "analysis", lambda: analysis_parts(run, session=session), session=session)
    return RunAnalysis(parts["table"], parts["slot_bias"], parts["slot_tests"])


def table_rows(
    records: Sequence[Mapping[str, Any]], items: Sequence[Item], start: int = 0
) -> list[tuple[Any, ...]]:
    """The decision table's rows (:data:`TABLE_COLUMNS`) of ``records`` (``decisions.jsonl``
    form), with the facts of ``items``, the dataset's items from position ``start`` on: flags
    as a comma-separated ``flags`` text plus one boolean column per flag; metrics an
    APOCJudge record lacks are NaN."""
    by_id = {item.item_id: (start + offset, item) for offset, item in enumerate(items)}
    rows = []
    for record in records:
        position, item = by_id[record["item_id"]]
        metrics = record["metrics"]
        rows.append(
            (
                item.item_id,
                item.metadata.get("db_id"),
                position,
                item.bucket,
                item.gold,
                item.candidate_ids,
                record["winner"],
                metrics.get("direct_winner"),
                *(number_or_nan(metrics.get(name)) for name in ITEM_METRICS),
                metrics.get("n_ok", 0),
                metrics.get("n_calls", 0),
                ", ".join(record["flags"]),
                *(flag in record["flags"] for flag in FLAGS),
            )
        )
    return rows


def table_chunk(rows: Sequence[tuple[Any, ...]]) -> pa.Table:
    """:func:`table_rows`' rows as Arrow columns (:data:`TABLE_SCHEMA`; a NaN metric null)."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(TABLE_SCHEMA)
    arrays = [
        pa.array(c, f.type, from_pandas=True) for c, f in zip(columns, TABLE_SCHEMA, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=TABLE_SCHEMA)


UNDEFINED = "undefined"
"""How a paired statistic without a usable pair reads (:func:`~pcf.evaluation.compare_paired`)."""


def p_value(p: float | None) -> str:
    """A p-value as shown (three significant digits), or ``undefined``."""
    return UNDEFINED if p is None else f"{p:.3g}"


def interval(points: tuple[float, float] | None) -> str:
    """An interval of a difference in points as shown, or ``undefined``."""
    return UNDEFINED if points is None else f"[{points[0]:+.1f}, {points[1]:+.1f}]"


def number_or_nan(value: Any) -> float:
    """A number as a float, None as NaN."""
    return math.nan if value is None else float(value)


def flag_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Items per flag, with the flag's one-line meaning, in :data:`FLAGS` order."""
    rows = [(flag, int(table[flag].sum()), FLAG_HELP[flag]) for flag in FLAGS]
    return pd.DataFrame(rows, columns=["flag", "items", "meaning"])


def accuracy_against(table: pd.DataFrame, answers: Mapping[str, str]) -> dict[str, Any] | None:
    """:func:`paired_stats` of a run's decision table (:attr:`RunAnalysis.table`) on the items
    with a known answer (``answers``: gold ids, or human labels), or None when none has one."""
    # Looked up row by row (`isin` of a large run's keys held 25 MB of hash tables), and the
    # three columns copied once (a pair per row held 5 MB more on 60,000 items).
    answered = [key in answers for key in table["item_id"]]
    known = table.loc[answered, ["item_id", "direct_winner", "winner"]]
    return None if known.empty else paired_stats(known, [answers[key] for key in known["item_id"]])


def paired_stats(table: pd.DataFrame, answers: Sequence[str], *, seed: int = 0) -> dict[str, Any]:
    """:func:`pcf.evaluation.compare_paired` of the consensus against the direct baseline on the
    rows of a decision table, ``answers`` holding each row's correct candidate."""
    return compare_paired(
        list(answers),
        [value_or_none(w) for w in table["direct_winner"]],
        [value_or_none(w) for w in table["winner"]],
        seed=seed,
    )


def gold_answers(table: pd.DataFrame) -> dict[str, str]:
    """``{item key: gold id}`` of the items with a gold label."""
    labelled = table.loc[table["gold"].notna(), ["item_id", "gold"]]
    ids: dict[str, str] = {}  # one string per gold id, however many items share it
    return {
        key: ids.setdefault(gold, gold)
        for key, gold in zip(labelled["item_id"], labelled["gold"], strict=True)
    }


def outcome_frame(stats: Mapping[str, Any]) -> pd.DataFrame:
    """Improved, regressed and unchanged item counts of a paired comparison."""
    counts = ("improved", "regressed", "both_right", "both_wrong")
    return pd.DataFrame(
        {
            "outcome": ["improved", "regressed", "same: both right", "same: both wrong"],
            "items": [stats[count] for count in counts],
        }
    )


def value_or_none(value: Any) -> Any:
    """None for a missing pandas value (pandas 3 stores a missing string as NaN)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value
