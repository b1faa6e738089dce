"""Humans against the judge: accuracy and chance-corrected agreement of direct and PCF on
adjudicated items, and agreement between annotators.

The human label of an item is its human gold (:mod:`pcf.labelling.human_gold`: a reviewer's
resolution, else what the plan's rule makes of its labels); an item without one is adjudicated
but left out of the accuracy and agreement figures.

Agreement is corrected for chance per item (:func:`pcf.evaluation.chance_corrected`: one over
the item's candidates), never over candidate ids as categories: an item's ids are its own, so
kappa over them measured how the dataset named its candidates. Between annotators, every
current label counts, ``none_correct`` included; ``cannot_tell`` counts as no label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pcf.analysis.results import value_or_none
from pcf.evaluation import Agreement, chance_corrected, compare_paired, rater_agreement
from pcf.items import CANNOT_TELL

COMPARISON_COLUMNS = (
    *("item_id", "human", "direct", "pcf", "gold"),
    *("annotators", "direct_correct", "pcf_correct"),
)


@dataclass(frozen=True)
class AnnotatorAgreement:
    """Agreement between the ``annotators`` who gave a label, on the ``items`` two of them or
    more labelled: per item the share of pairs of people who chose the same, averaged, and
    corrected for chance (:class:`pcf.evaluation.Agreement`), or a ``note`` why there is none."""

    annotators: int
    items: int
    figure: Agreement | None
    note: str | None = None


def annotator_agreement(labels: pd.DataFrame, candidates: Mapping[str, int]) -> AnnotatorAgreement:
    """Chance-corrected agreement between people over the current ``labels`` (``item_key``,
    ``annotator``, ``choice``) of items with two labels or more, ``candidates`` the number of
    candidates of each item."""
    usable = labels[labels["choice"] != CANNOT_TELL]
    annotators = labels["annotator"].nunique()
    if annotators < 2:
        return AnnotatorAgreement(annotators, 0, None, "needs two annotators")
    shared = [(key, list(g["choice"])) for key, g in usable.groupby("item_key") if len(g) >= 2]
    if not shared:
        return AnnotatorAgreement(annotators, 0, None, "no item has labels from two annotators")
    figure = rater_agreement([c for _, c in shared], [candidates[k] for k, _ in shared])
    return AnnotatorAgreement(annotators, len(shared), figure)


@dataclass(frozen=True)
class HumanComparison:
    """Direct and PCF decisions of one run against the human labels.

    Attributes:
        adjudicated: items with human gold, or with all the labels their plan asks for.
        unresolved: adjudicated items without a human label (ties, or no candidate chosen).
        rows: one row per item with a human label (:data:`COMPARISON_COLUMNS`).
        paired: :func:`pcf.evaluation.compare_paired` of PCF against direct, None without rows.
        direct, pcf: each one's agreement with the human labels, corrected for chance
            (an abstention disagrees), None without rows.
        gold_agreement: ``(agree, compared)``: human labels equal to the dataset's gold.
    """

    adjudicated: int
    unresolved: list[str]
    rows: pd.DataFrame
    paired: dict[str, Any] | None
    direct: Agreement | None
    pcf: Agreement | None
    agreement: AnnotatorAgreement
    gold_agreement: tuple[int, int]

    def disagreements(self) -> pd.DataFrame:
        """Items where direct or PCF differs from the human label, in item order."""
        return self.rows[~(self.rows["direct_correct"] & self.rows["pcf_correct"])]


def compare_with_humans(
    decisions: Sequence[Mapping[str, Any]],
    labels: pd.DataFrame,
    human: Mapping[str, str | None],
    *,
    candidates: Mapping[str, int],
    gold: Mapping[str, str | None] | None = None,
) -> HumanComparison:
    """Compare a run's direct and PCF winners (its ``decisions.jsonl`` records) with the human
    label of each adjudicated item (``human``: None where it has none), given the current
    ``labels``, each item's number of ``candidates`` and the dataset's ``gold`` ids shown
    beside them."""
    gold = gold or {}
    by_item = {d["item_id"]: d for d in decisions}
    annotators = labels.groupby("item_key")["annotator"].nunique().to_dict()
    records: list[tuple[str, str, str | None, str | None, str | None, int, bool, bool]] = []
    for item_id, label in human.items():
        if label is None or item_id not in by_item:
            continue
        decision = by_item[item_id]
        direct, pcf = decision["metrics"].get("direct_winner"), decision["winner"]
        row = (item_id, label, direct, pcf, gold.get(item_id), int(annotators[item_id]))
        records.append((*row, direct == label, pcf == label))
    rows = pd.DataFrame(records, columns=list(COMPARISON_COLUMNS), dtype=object).astype(
        {"annotators": int, "direct_correct": bool, "pcf_correct": bool}
    )
    paired = direct_agreement = pcf_agreement = None
    if records:
        _, truth, direct, pcf, *_ = zip(*records, strict=True)
        paired = compare_paired(truth, direct, pcf)
        counts = [candidates[item_id] for item_id in rows["item_id"]]
        direct_agreement = chance_corrected(list(rows["direct_correct"]), counts)
        pcf_agreement = chance_corrected(list(rows["pcf_correct"]), counts)
    with_gold = [(h, gold[i]) for i, h in human.items() if h is not None and gold.get(i)]
    return HumanComparison(
        adjudicated=len(human),
        unresolved=[i for i, label in human.items() if label is None],
        rows=rows,
        paired=paired,
        direct=direct_agreement,
        pcf=pcf_agreement,
        agreement=annotator_agreement(labels, candidates),
        gold_agreement=(sum(h == g for h, g in with_gold), len(with_gold)),
    )


def table_human_comparison(
    table: pd.DataFrame, labels: pd.DataFrame, human: Mapping[str, str | None]
) -> HumanComparison:
    """:func:`compare_with_humans` from a run's decision table, without deciding it again."""
    decisions = [
        {"item_id": i, "winner": value_or_none(w), "metrics": {"direct_winner": value_or_none(d)}}
        for i, w, d in zip(table["item_id"], table["winner"], table["direct_winner"], strict=True)
    ]
    gold = {item: value_or_none(g) for item, g in zip(table["item_id"], table["gold"], strict=True)}
    candidates = dict(zip(table["item_id"], table["candidate_ids"].map(len), strict=True))
    return compare_with_humans(decisions, labels, human, candidates=candidates, gold=gold)
