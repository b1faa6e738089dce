"""One item of a run under the magnifier: its calls as a heatmap frame, the slot coverage, the
consensus and its components, and the labels the pages show for its candidates."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from pcf.analysis.adjudications import choice_label
from pcf.analysis.item_list import letter_labels
from pcf.analysis.results import number_or_nan, value_or_none
from pcf.consensus import pack
from pcf.decisions import decide
from pcf.items import Item
from pcf.orderings import slot_coverage
from pcf.store.models import Call
from pcf.store.queries import stored_judgment
from pcf.weights import DEFAULT_WEIGHTS, Weights

PREVIEW_WORDS = 8


def item_decision(
    item: Item, calls: Sequence[Call], weights: Weights = DEFAULT_WEIGHTS
) -> dict[str, Any] | None:
    """The ``decisions.jsonl`` record of one item from its listwise calls (None without calls).

    Consensus is computed per item, so under the run's weights
    (:func:`pcf.analysis.results.run_weights`) this equals the item's record in the whole run.
    """
    if not calls:
        return None
    judgments = [
        stored_judgment(
            item.item_id,
            call.execution,
            call.call_index,
            call.ok,
            call.error,
            call.order,
            call.judgment,
            call.repaired,
        )
        for call in calls
    ]
    (group,) = pack(judgments, {item.item_id: item.candidate_ids})
    return decide(group, weights=weights).records()[0]


def candidate_labels(item: Item) -> dict[str, str]:
    """Short labels of the item's candidates in listing order: ``A``, ``B``, ... (``#27``...)."""
    return letter_labels(item.candidate_ids)


def candidate_titles(item: Item, words: int = PREVIEW_WORDS) -> dict[str, str]:
    """``A · The first words of the answer…`` per candidate, from where the answers differ
    (:func:`distinguishing_words`): a label a reader can tell apart."""
    labels = candidate_labels(item)
    shown = distinguishing_words({c.id: c.text for c in item.candidates}, words)
    return {c.id: f"{labels[c.id]} · {shown[c.id]}" for c in item.candidates}


def _words(text: str) -> list[str]:
    """The words of ``text`` with Markdown marks dropped."""
    return re.sub(r"[#>|\[\]]+", " ", re.sub(r"[*_`]+", "", text)).split()


def first_words(text: str, words: int = PREVIEW_WORDS) -> str:
    """The first ``words`` words of ``text`` on one line, with ``…`` when there is more."""
    parts = _words(text)
    return " ".join(parts[:words]) + ("…" if len(parts) > words else "")


def distinguishing_words(texts: Mapping[str, str], words: int = PREVIEW_WORDS) -> dict[str, str]:
    """A one-line preview of each text that tells it from the others: its first ``words`` words
    when they already differ from every other text's, else ``words`` words from the last word
    it shares with the text most like it (``…list of years from 2000 to 2010, then…``).

    Args:
        texts: ``{key: text}``, e.g. an item's candidates.
        words: how many words each preview shows.
    """
    split = {key: _words(text) for key, text in texts.items()}
    previews = {}
    for key, mine in split.items():
        shared = max((_shared_words(mine, split[k]) for k in split if k != key), default=0)
        start = 0 if shared < words else min(shared, len(mine)) - 1
        start = max(0, min(start, len(mine) - words))
        shown = " ".join(mine[start : start + words])
        previews[key] = ("…" if start else "") + shown + ("…" if start + words < len(mine) else "")
    return previews


def _shared_words(first: Sequence[str], second: Sequence[str]) -> int:
    """How many words two word lists share from their start."""
    return next(
        (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
        min(len(first), len(second)),
    )


def ordering_label(call: Call, labels: Mapping[str, str]) -> str:
    """``e0·c3  B A D C``: execution, call index, then the candidate in each slot."""
    return f"e{call.execution}·c{call.call_index}  " + " ".join(labels[c] for c in call.order)


def ordering_frame(item: Item, calls: Sequence[Call]) -> pd.DataFrame:
    """The heatmap's data: one row per (call, candidate), calls in order, candidates listed.

    Columns: ``ordering`` (:func:`ordering_label`), ``execution``, ``call_index``,
    ``candidate`` (label), ``candidate_id``, ``slot`` (1-based), ``rank`` (1 = best),
    ``factuality`` (0-10), ``risk`` and ``ok``; rank and scores are NaN for a failed call.
    """
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
    """The slot-coverage matrix of an item's calls: how often each candidate sat in each slot.

    One row per candidate (its label), one column per slot (``slot 1`` is shown first).
    """
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
        ranking = parsed.get("ranking") or []
        verdict = parsed.get("verdict")
        top = ranking[0] if ranking else verdict
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
    """Per candidate: consensus ``C`` and its components S, B, V, U, and its roles.

    Roles name the consensus winner, the direct winner and the gold answer.
    """
    labels = candidate_labels(item)
    columns = ["candidate", "id", "C", "S", "B", "V", "U", "role"]
    if not record or not record["consensus"]:
        return pd.DataFrame(columns=columns)
    parts = record["metrics"]["components"]
    rows = []
    for cid in item.candidate_ids:
        roles = candidate_roles(
            cid, record["winner"], record["metrics"]["direct_winner"], item.gold
        )
        rows.append(
            {
                "candidate": labels[cid],
                "id": cid,
                "C": record["consensus"][cid],
                **{part: parts[part][cid] for part in ("S", "B", "V", "U")},
                "role": ", ".join(roles),
            }
        )
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
