"""One item of a run under the magnifier: its calls as a heatmap frame, the slot coverage, the
consensus and its components, and the labels the pages show for its candidates."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from pcf.analysis.results import number_or_nan, value_or_none
from pcf.consensus import pack
from pcf.decisions import decide
from pcf.items import Item, candidate_labels
from pcf.labelling.adjudications import choice_label
from pcf.orderings import slot_coverage
from pcf.store import Call, call_judgments
from pcf.weights import DEFAULT_WEIGHTS, Weights


def item_decision(
    item: Item, calls: Sequence[Call], weights: Weights = DEFAULT_WEIGHTS
) -> dict[str, Any] | None:
    """The ``decisions.jsonl`` record of one item from its listwise calls (None without calls):
    under :func:`pcf.analysis.results.run_weights`, its record in the whole run."""
    if not calls:
        return None
    judgments = call_judgments(item.item_id, calls)
    (group,) = pack(judgments, {item.item_id: item.candidate_ids})
    return decide(group, weights=weights).records()[0]


def ordering_label(call: Call, labels: Mapping[str, str]) -> str:
    """``e0·c3  B A D C``: execution, call index, then the candidate in each slot."""
    return f"e{call.execution}·c{call.call_index}  " + " ".join(labels[c] for c in call.order)


def ordering_frame(item: Item, calls: Sequence[Call]) -> pd.DataFrame:
    """The heatmap's data: one row per (call, candidate), calls in order, candidates listed;
    rank and scores are NaN for a failed call."""
    labels = candidate_labels(item)
    rows = []
    for call in calls:
        parsed = (call.judgment or {}) if call.ok else {}
        ranking = list(parsed.get("ranking", ()))
        for cid in item.candidate_ids:
            rows.append(
                {
                    "ordering": ordering_label(call, labels),
                    "execution": call.execution,
                    "call_index": call.call_index,
                    "candidate": labels[cid],
                    "candidate_id": cid,
                    "slot": call.order.index(cid) + 1,
                    "rank": float(ranking.index(cid) + 1) if cid in ranking else math.nan,
                    "factuality": number_or_nan(parsed.get("factuality", {}).get(cid)),
                    "risk": number_or_nan(parsed.get("hallucination_risk", {}).get(cid)),
                    "ok": call.ok,
                }
            )
    columns = ["ordering", "execution", "call_index", "candidate", "candidate_id", "slot"]
    return pd.DataFrame(rows, columns=[*columns, "rank", "factuality", "risk", "ok"])


def coverage_frame(item: Item, calls: Sequence[Call]) -> pd.DataFrame:
    """How often each candidate (a row, by label) sat in each slot (``slot 1`` first)."""
    labels = candidate_labels(item)
    counts = slot_coverage([tuple(call.order) for call in calls], item.candidate_ids)
    return pd.DataFrame(
        counts,
        index=pd.Index([labels[cid] for cid in item.candidate_ids], name="candidate"),
        columns=[f"slot {slot}" for slot in range(1, len(item.candidate_ids) + 1)],
    )


def calls_frame(item: Item, calls: Sequence[Call]) -> pd.DataFrame:
    """One row per call: its ordering, outcome, top pick (or pairwise verdict) and confidence."""
    labels = candidate_labels(item)
    rows = []
    for call in calls:
        parsed = call.judgment or {}
        top = (parsed.get("ranking") or [parsed.get("verdict")])[0]
        rows.append(
            {
                "ordering": ordering_label(call, labels),
                "ok": call.ok,
                "top pick": labels.get(top, top) if call.ok and top is not None else None,
                "confidence": parsed.get("confidence") if call.ok else None,
                "error": call.error,
                "repaired": ", ".join(call.repaired),
                "cached": call.cached_from is not None,
            }
        )
    columns = ["ordering", "ok", "top pick", "confidence", "error", "repaired", "cached"]
    return pd.DataFrame(rows, columns=columns)


def consensus_frame(item: Item, record: Mapping[str, Any] | None) -> pd.DataFrame:
    """Per candidate: consensus ``C``, its components S, B, V, U, and :func:`candidate_roles`."""
    labels = candidate_labels(item)
    columns = ["candidate", "id", "C", "S", "B", "V", "U", "role"]
    if not record or not record["consensus"]:
        return pd.DataFrame(columns=columns)
    parts, direct = record["metrics"]["components"], record["metrics"]["direct_winner"]
    rows = [
        {
            "candidate": labels[cid],
            "id": cid,
            "C": record["consensus"][cid],
            **{part: parts[part][cid] for part in ("S", "B", "V", "U")},
            "role": ", ".join(candidate_roles(cid, record["winner"], direct, item.gold)),
        }
        for cid in item.candidate_ids
    ]
    return pd.DataFrame(rows, columns=columns)


def candidate_roles(
    candidate_id: str, winner: str | None, direct_winner: str | None, gold: str | None
) -> list[str]:
    """Which of PCF winner, direct winner and gold a candidate is."""
    holders = (("PCF winner", winner), ("direct winner", direct_winner), ("gold", gold))
    return [name for name, holder in holders if value_or_none(holder) == candidate_id]


def describe_candidate(candidate_id: str | None, labels: Mapping[str, str]) -> str:
    """The label of a candidate (``C``), a choice's name, or ``—`` for none (abstention)."""
    candidate_id = value_or_none(candidate_id)
    if candidate_id is None:
        return "—"
    return labels.get(candidate_id) or choice_label(candidate_id, labels)


def format_number(value: float, spec: str) -> str:
    """``value`` in the format ``spec``, or ``—`` when it is unknown (NaN)."""
    return "—" if math.isnan(value) else format(value, spec)
