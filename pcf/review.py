"""Data for the Overview, Review and Adjudicate pages: focused queries and pure frames.

The pages stay thin: everything they show is computed here, from stored calls and labels,
with the statistics of :mod:`pcf.decisions`, :mod:`pcf.instability` and :mod:`pcf.evaluation`.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import distinct, func, or_
from sqlmodel import Session, col, select

from pcf.consensus import pack
from pcf.decisions import decide
from pcf.evaluation import compare_paired
from pcf.instability import FLAG_HELP, FLAGS, slot_bias
from pcf.items import Candidate, Item
from pcf.orderings import seeded_rng, slot_coverage
from pcf.results import run_decisions
from pcf.store.models import Adjudication, Call, CandidateRow, ItemRow, Run
from pcf.store.queries import load_items, run_judgments, stored_judgment

PATTERN_TAGS = (
    "unsupported specificity",
    "calibrated narrow correction",
    "near-tie",
    "transfer failure",
)
CHOICE_LABELS = {"none_correct": "None is correct", "cannot_tell": "Cannot tell"}
ADJUDICATED_FILTERS = ("all", "adjudicated", "not adjudicated")
CONFIDENCE_LEVELS = {
    1: "1 · guess",
    2: "2 · unsure",
    3: "3 · fairly sure",
    4: "4 · sure",
    5: "5 · certain",
}
TABLE_COLUMNS = (
    "item_id",
    "db_id",
    "position",
    "bucket",
    "gold",
    "winner",
    "direct_winner",
    "priority",
    "top_agreement",
    "kendall_w",
    "margin",
    "n_ok",
    "n_calls",
    "flags",
    *FLAGS,
)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:])")


# ---------------------------------------------------------------- run level


@dataclass(frozen=True)
class RunAnalysis:
    """What the pages need of a whole run, computed once per run version.

    Attributes:
        table: one row per decided item, in item order, with :data:`TABLE_COLUMNS`.
        slot_bias: per candidate count ``n`` and slot (1-based): ``top_share``, ``top_count``,
            ``gold_recall`` (NaN where unknown).
        slot_tests: per ``n``: ``calls`` (ok calls), ``chi2``, ``p_value`` of the chi-square
            test of top picks per slot against uniform.
    """

    table: pd.DataFrame
    slot_bias: pd.DataFrame
    slot_tests: pd.DataFrame


def run_version(run: Run, *, session: Session) -> tuple[str, int, int]:
    """A key that changes whenever the run's calls change: status, call count, newest call id."""
    count, newest = session.exec(
        select(func.count(col(Call.id)), func.coalesce(func.max(col(Call.id)), 0)).where(
            Call.run_id == run.id
        )
    ).one()
    return run.status, int(count), int(newest)


def analyse_run(run: Run, *, session: Session) -> RunAnalysis:
    """Decisions, flags and slot bias of every item of a run, from its stored calls.

    The judgments are read and packed once; decisions use the default weights, as
    :func:`pcf.results.run_decisions` does. APOCJudge runs have no slot-bias rows.
    """
    items = load_items(run.dataset_id, session=session)
    if run.protocol == "apoc":
        records = run_decisions(run, session=session, items=items)
        return RunAnalysis(decision_table(records, items), _slot_frame([]), _slot_tests_frame([]))
    by_id = {item.item_id: item for item in items}
    groups = pack(
        run_judgments(run.id, session=session),
        {item.item_id: item.candidate_ids for item in items},
    )
    records: dict[str, dict[str, Any]] = {}
    biases = []
    for group in groups:
        for record in decide(group).records():
            records[record["item_id"]] = record
        biases.append(slot_bias(group, [by_id[i].gold for i in group.item_ids]))
    ordered = [records[i.item_id] for i in items if i.item_id in records]
    return RunAnalysis(
        decision_table(ordered, items), _slot_frame(biases), _slot_tests_frame(biases)
    )


def decision_table(records: Sequence[Mapping[str, Any]], items: Sequence[Item]) -> pd.DataFrame:
    """One row per decision record (``decisions.jsonl`` form), with its item's facts.

    Flags are a comma-separated ``flags`` text plus one boolean column per flag; metrics an
    APOCJudge record lacks are NaN.
    """
    by_id = {item.item_id: (position, item) for position, item in enumerate(items)}
    rows = []
    for record in records:
        position, item = by_id[record["item_id"]]
        metrics = record["metrics"]
        rows.append(
            {
                "item_id": item.item_id,
                "db_id": item.metadata.get("db_id"),
                "position": position,
                "bucket": item.bucket,
                "gold": item.gold,
                "winner": record["winner"],
                "direct_winner": metrics.get("direct_winner"),
                **{
                    name: _float(metrics.get(name))
                    for name in ("priority", "top_agreement", "kendall_w", "margin")
                },
                "n_ok": metrics.get("n_ok", 0),
                "n_calls": metrics.get("n_calls", 0),
                "flags": ", ".join(record["flags"]),
                **{flag: flag in record["flags"] for flag in FLAGS},
            }
        )
    frame = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    return frame.astype(dict.fromkeys(FLAGS, bool) | {"n_ok": int, "n_calls": int})


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def _slot_frame(biases: Sequence[Any]) -> pd.DataFrame:
    rows = [
        {
            "n": bias.n,
            "slot": slot + 1,
            "top_share": float(bias.top_share[slot]),
            "top_count": int(bias.top_counts[slot]),
            "gold_recall": float(bias.gold_recall[slot]),
        }
        for bias in biases
        for slot in range(bias.n)
    ]
    return pd.DataFrame(rows, columns=["n", "slot", "top_share", "top_count", "gold_recall"])


def _slot_tests_frame(biases: Sequence[Any]) -> pd.DataFrame:
    rows = [
        {"n": b.n, "calls": int(b.top_counts.sum()), "chi2": b.chi2, "p_value": b.p_value}
        for b in biases
    ]
    return pd.DataFrame(rows, columns=["n", "calls", "chi2", "p_value"])


def flag_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Items per flag, with the flag's one-line meaning, in :data:`FLAGS` order."""
    return pd.DataFrame(
        {
            "flag": list(FLAGS),
            "items": [int(table[flag].sum()) for flag in FLAGS],
            "meaning": [FLAG_HELP[flag] for flag in FLAGS],
        }
    )


# ---------------------------------------------------------------- accuracy


def accuracy_against(
    table: pd.DataFrame, answers: Mapping[str, str], *, seed: int = 0
) -> dict[str, Any] | None:
    """The run's consensus against its direct baseline on the items with a known answer.

    Args:
        table: :attr:`RunAnalysis.table`.
        answers: the correct candidate per item key (gold ids, or human labels).
        seed: seed of the paired bootstrap.

    Returns:
        :func:`pcf.evaluation.compare_paired` on those items, or None when none has an answer.
    """
    known = table[table["item_id"].isin(answers.keys())]
    if known.empty:
        return None
    return compare_paired(
        [answers[key] for key in known["item_id"]],
        [_optional(w) for w in known["direct_winner"]],
        [_optional(w) for w in known["winner"]],
        seed=seed,
    )


def gold_answers(table: pd.DataFrame) -> dict[str, str]:
    """``{item key: gold id}`` of the items with a gold label."""
    labelled = table[table["gold"].notna()]
    return dict(zip(labelled["item_id"], labelled["gold"], strict=True))


def outcome_frame(stats: Mapping[str, Any]) -> pd.DataFrame:
    """Improved, regressed and unchanged item counts of a paired comparison."""
    return pd.DataFrame(
        {
            "outcome": ["improved", "regressed", "same: both right", "same: both wrong"],
            "items": [
                stats["improved"],
                stats["regressed"],
                stats["both_right"],
                stats["both_wrong"],
            ],
        }
    )


def _optional(value: Any) -> Any:
    """None for a missing pandas value (pandas 3 stores a missing string as NaN)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


# ---------------------------------------------------------------- the item list


def labelled_item_counts(dataset_id: int, *, session: Session) -> dict[str, int]:
    """``{item key: number of annotators who labelled it}`` for the labelled items."""
    rows = session.exec(
        select(ItemRow.item_key, func.count(distinct(Adjudication.annotator)))
        .join(Adjudication, col(Adjudication.item_id) == ItemRow.id)
        .where(ItemRow.dataset_id == dataset_id)
        .group_by(ItemRow.item_key)
    )
    return dict(rows.all())


def matching_item_keys(dataset_id: int, text: str, *, session: Session) -> set[str]:
    """Keys of the items whose id, prompt or any candidate contains ``text`` (any case)."""
    rows = session.exec(
        select(ItemRow.item_key)
        .join(CandidateRow, col(CandidateRow.item_id) == ItemRow.id)
        .where(
            ItemRow.dataset_id == dataset_id,
            or_(
                col(ItemRow.item_key).icontains(text, autoescape=True),
                col(ItemRow.prompt).icontains(text, autoescape=True),
                col(CandidateRow.text).icontains(text, autoescape=True),
            ),
        )
        .distinct()
    )
    return set(rows.all())


def filter_items(
    table: pd.DataFrame,
    *,
    flags: Collection[str] = (),
    overrides_only: bool = False,
    buckets: Collection[str] = (),
    adjudicated: str = "all",
    labelled: Collection[str] = (),
    matching: Collection[str] | None = None,
) -> pd.DataFrame:
    """The rows that pass every filter, most doubtful first (priority, then item order).

    Args:
        table: :attr:`RunAnalysis.table`.
        flags: keep items raising any of these flags (none given: no flag filter).
        overrides_only: keep items whose consensus overrides the direct winner.
        buckets: keep items of these buckets (none given: every bucket).
        adjudicated: one of :data:`ADJUDICATED_FILTERS`.
        labelled: keys of the items someone has labelled.
        matching: keys of the items a text search found; None when there is no search.
    """
    if adjudicated not in ADJUDICATED_FILTERS:
        raise ValueError(f"adjudicated must be one of {ADJUDICATED_FILTERS}, got {adjudicated!r}")
    keep = pd.Series(True, index=table.index)
    if flags:
        keep &= table[list(flags)].any(axis=1)
    if overrides_only:
        keep &= table["overrides_direct"]
    if buckets:
        keep &= table["bucket"].isin(list(buckets))
    if adjudicated != "all":
        is_labelled = table["item_id"].isin(list(labelled))
        keep &= is_labelled if adjudicated == "adjudicated" else ~is_labelled
    if matching is not None:
        keep &= table["item_id"].isin(list(matching))
    return by_priority(table[keep])


def by_priority(table: pd.DataFrame) -> pd.DataFrame:
    """Rows most doubtful first; equal priorities in item order, unknown priorities last."""
    return table.sort_values(
        ["priority", "position"], ascending=[False, True], na_position="last", kind="stable"
    )


def list_view(rows: pd.DataFrame, labelled: Mapping[str, int]) -> pd.DataFrame:
    """The item list as the Review page shows it."""
    return pd.DataFrame(
        {
            "item": rows["item_id"],
            "priority": rows["priority"].round(3),
            "flags": rows["flags"],
            "PCF winner": rows["winner"],
            "direct winner": rows["direct_winner"],
            "gold": rows["gold"],
            "bucket": rows["bucket"],
            "labels": [labelled.get(key, 0) for key in rows["item_id"]],
        }
    ).reset_index(drop=True)


def neighbours(keys: Sequence[str], current: str | None) -> tuple[str | None, str | None]:
    """The items before and after ``current`` in ``keys``.

    When ``current`` is not in the list, there is no previous item and the next is the first.
    """
    if current not in keys:
        return None, keys[0] if keys else None
    at = keys.index(current)
    return (keys[at - 1] if at > 0 else None), (keys[at + 1] if at + 1 < len(keys) else None)


# ---------------------------------------------------------------- one item


def load_item(item_db_id: int, *, session: Session) -> Item | None:
    """One item by database id, candidates in listing order (``metadata["db_id"]`` set)."""
    row = session.get(ItemRow, item_db_id)
    if row is None:
        return None
    candidates = session.exec(
        select(CandidateRow.candidate_key, CandidateRow.text)
        .where(CandidateRow.item_id == item_db_id)
        .order_by(col(CandidateRow.position))
    ).all()
    return Item(
        row.item_key,
        row.prompt,
        tuple(Candidate(key, text) for key, text in candidates),
        row.gold,
        row.bucket,
        {**row.item_metadata, "db_id": row.id},
    )


def item_calls(run_id: int, item_db_id: int, *, session: Session) -> list[Call]:
    """The run's calls of one item, by execution and call index."""
    return list(
        session.exec(
            select(Call)
            .where(Call.run_id == run_id, Call.item_id == item_db_id)
            .order_by(col(Call.execution), col(Call.call_index))
        ).all()
    )


def item_decision(item: Item, calls: Sequence[Call]) -> dict[str, Any] | None:
    """The ``decisions.jsonl`` record of one item from its listwise calls (None without calls).

    Consensus is computed per item, so this equals the item's record in the whole run.
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
    return decide(group).records()[0]


def candidate_labels(item: Item) -> dict[str, str]:
    """Short labels of the item's candidates in listing order: ``A``, ``B``, ... (``#27``...)."""
    letters = string.ascii_uppercase
    return {
        cid: letters[i] if len(item.candidates) <= len(letters) else f"#{i + 1}"
        for i, cid in enumerate(item.candidate_ids)
    }


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
                    "factuality": _float(parsed.get("factuality", {}).get(cid)),
                    "risk": _float(parsed.get("hallucination_risk", {}).get(cid)),
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
                "top pick": labels.get(top, top) if call.ok else None,
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
    return [name for name, holder in holders if _optional(holder) == candidate_id]


def describe_candidate(candidate_id: str | None, labels: Mapping[str, str]) -> str:
    """``C (s20)`` for a candidate labelled ``C``, ``—`` for none (abstention, no label)."""
    candidate_id = _optional(candidate_id)
    return "—" if candidate_id is None else choice_label(candidate_id, labels)


def format_number(value: float, spec: str) -> str:
    """``value`` in the format ``spec``, or ``—`` when it is unknown (NaN)."""
    return "—" if math.isnan(value) else format(value, spec)


def escape_markdown(text: str) -> str:
    """``text`` with every Markdown and HTML special character backslash-escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


# ---------------------------------------------------------------- adjudication


def adjudication_queue(
    items: pd.DataFrame, done: Collection[str], skipped: Sequence[str] = ()
) -> list[str]:
    """Item keys to label, most doubtful first, without the ``done`` ones.

    Args:
        items: ``item_id``, ``position`` and ``priority`` (NaN last, in item order).
        done: the items the annotator has labelled.
        skipped: items put off for now; they go to the end, in the order they were skipped.
    """
    waiting = [key for key in by_priority(items)["item_id"] if key not in done]
    later = [key for key in dict.fromkeys(skipped) if key in set(waiting)]
    deferred = set(later)
    return [key for key in waiting if key not in deferred] + later


def item_index(dataset_id: int, *, session: Session) -> pd.DataFrame:
    """The dataset's items in file order with ``item_id``, ``db_id``, ``position`` and a NaN
    ``priority`` (see :func:`with_priority`)."""
    rows = session.exec(
        select(ItemRow.item_key, ItemRow.id, ItemRow.position)
        .where(ItemRow.dataset_id == dataset_id)
        .order_by(col(ItemRow.position))
    ).all()
    frame = pd.DataFrame([tuple(row) for row in rows], columns=["item_id", "db_id", "position"])
    return frame.assign(priority=math.nan)


def with_priority(index: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """:func:`item_index` with each item's review priority in a run (NaN: not decided)."""
    priority = table.set_index("item_id")["priority"]
    return index.assign(priority=index["item_id"].map(priority))


def display_order(item: Item, annotator: str) -> tuple[str, ...]:
    """The item's candidate ids in the order shown to ``annotator``: seeded by both, so it is
    stable for one annotator and differs between annotators."""
    permutation = seeded_rng(annotator, item.item_id).permutation(len(item.candidates))
    return tuple(item.candidate_ids[i] for i in permutation)


def confidence_value(level: int) -> float:
    """A 1-5 confidence level as a share: 1 -> 0.0, 3 -> 0.5, 5 -> 1.0."""
    if level not in CONFIDENCE_LEVELS:
        raise ValueError(f"confidence level must be 1 to 5, got {level}")
    return (level - 1) / 4


def display_labels(shown: Sequence[str]) -> dict[str, str]:
    """``{candidate id: "Candidate 1"}`` for candidates shown in this order."""
    return {cid: f"Candidate {i + 1}" for i, cid in enumerate(shown)}


def choice_label(choice: str, labels: Mapping[str, str]) -> str:
    """How a choice reads: ``Candidate 2 (s20)``, ``None is correct`` or ``Cannot tell``."""
    if choice in CHOICE_LABELS:
        return CHOICE_LABELS[choice]
    return f"{labels[choice]} ({choice})" if choice in labels else choice


def history_frame(history: Iterable[Adjudication], labels: Mapping[str, str]) -> pd.DataFrame:
    """An item's labels, oldest first, choices named with ``labels`` (see :func:`choice_label`)."""
    rows = [
        {
            "label": adj.id,
            "when": adj.created_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
            "annotator": adj.annotator,
            "choice": choice_label(adj.choice, labels),
            "confidence": adj.confidence,
            "tags": ", ".join(adj.tags),
            "notes": adj.notes,
            "corrects label": adj.supersedes,
        }
        for adj in history
    ]
    columns = ["label", "when", "annotator", "choice", "confidence", "tags", "notes"]
    return pd.DataFrame(rows, columns=[*columns, "corrects label"])
