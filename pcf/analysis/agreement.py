"""Humans against the judge: accuracy and kappa of direct and PCF on adjudicated items, and
agreement between annotators.

The human label of an item is its human gold (:mod:`pcf.labelling.human_gold`: a reviewer's
resolution, else what the plan's rule makes of its labels); an item without one is adjudicated
but left out of the accuracy and kappa figures.

Agreement between annotators uses every current label as a nominal category, ``none_correct``
included; ``cannot_tell`` counts as no label.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pcf.analysis.results import value_or_none
from pcf.evaluation import cohen_kappa, compare_paired, krippendorff_alpha
from pcf.items import CANNOT_TELL

COMPARISON_COLUMNS = (
    *("item_id", "human", "direct", "pcf", "gold"),
    *("annotators", "direct_correct", "pcf_correct"),
)


@dataclass(frozen=True)
class AnnotatorAgreement:
    """Agreement between the ``annotators`` who gave a label, on the ``items`` two of them
    labelled: the ``statistic`` (``cohen_kappa`` or ``krippendorff_alpha``) and its ``value``,
    or a ``note`` why there is none."""

    annotators: int
    items: int
    statistic: str | None
    value: float | None
    note: str | None = None


def annotator_agreement(labels: pd.DataFrame) -> AnnotatorAgreement:
    """Cohen's kappa for two annotators, Krippendorff's alpha (nominal) for more, of current
    labels (``item_key``, ``annotator``, ``choice``)."""
    usable = labels[labels["choice"] != CANNOT_TELL]
    annotators = sorted(labels["annotator"].unique())
    shared = int((usable.groupby("item_key")["annotator"].nunique() >= 2).sum())
    if len(annotators) < 2:
        return AnnotatorAgreement(len(annotators), 0, None, None, "needs two annotators")
    statistic = "cohen_kappa" if len(annotators) == 2 else "krippendorff_alpha"
    if shared == 0:
        return AnnotatorAgreement(
            len(annotators), 0, statistic, None, "no item has labels from two annotators"
        )
    table = usable.pivot(index="annotator", columns="item_key", values="choice")
    table = table.reindex(annotators).astype(object)
    rows = [[None if pd.isna(v) else v for v in table.loc[a]] for a in annotators]
    try:
        value = cohen_kappa(*rows) if statistic == "cohen_kappa" else krippendorff_alpha(rows)
    except ValueError:  # krippendorff refuses a single category
        value = math.nan
    if math.isnan(value):
        return AnnotatorAgreement(
            len(annotators), shared, statistic, None, "undefined: every label is the same"
        )
    return AnnotatorAgreement(len(annotators), shared, statistic, value)


@dataclass(frozen=True)
class HumanComparison:
    """Direct and PCF decisions of one run against the human labels.

    Attributes:
        adjudicated: items with human gold, or with all the labels their plan asks for.
        unresolved: adjudicated items without a human label (ties, or no candidate chosen).
        rows: one row per item with a human label (:data:`COMPARISON_COLUMNS`).
        paired: :func:`pcf.evaluation.compare_paired` of PCF against direct, None without rows.
        kappa_direct, kappa_pcf: Cohen's kappa of the winners against the human labels
            (:data:`ABSTAINED` a category of its own).
        gold_agreement: ``(agree, compared)``: human labels equal to the dataset's gold.
    """

    adjudicated: int
    unresolved: list[str]
    rows: pd.DataFrame
    paired: dict[str, Any] | None
    kappa_direct: float | None
    kappa_pcf: float | None
    agreement: AnnotatorAgreement
    gold_agreement: tuple[int, int]

    def disagreements(self) -> pd.DataFrame:
        """Items where direct or PCF differs from the human label, in item order."""
        return self.rows[~(self.rows["direct_correct"] & self.rows["pcf_correct"])]


ABSTAINED = "abstained"
"""The judge's category in kappa where it gave no winner: a disagreement with the human label,
as accuracy counts an abstention wrong (not an item left out)."""


def _kappa(judge: Sequence[str | None], human: Sequence[str]) -> float | None:
    """Cohen's kappa of judge winners against human labels, an abstention as its own category
    (:data:`ABSTAINED`); None when undefined."""
    try:
        value = cohen_kappa([ABSTAINED if w is None else w for w in judge], human)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def compare_with_humans(
    decisions: Sequence[Mapping[str, Any]],
    labels: pd.DataFrame,
    human: Mapping[str, str | None],
    *,
    gold: Mapping[str, str | None] | None = None,
) -> HumanComparison:
    """Compare a run's direct and PCF winners (its ``decisions.jsonl`` records) with the human
    label of each adjudicated item (``human``: None where it has none), given the current
    ``labels`` and the dataset's ``gold`` ids shown beside them."""
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
    paired = kappa_direct = kappa_pcf = None
    if records:
        _, truth, direct, pcf, *_ = zip(*records, strict=True)
        paired = compare_paired(truth, direct, pcf)
        kappa_direct = _kappa(direct, truth)
        kappa_pcf = _kappa(pcf, truth)
    with_gold = [(h, gold[i]) for i, h in human.items() if h is not None and gold.get(i)]
    return HumanComparison(
        adjudicated=len(human),
        unresolved=[i for i, label in human.items() if label is None],
        rows=rows,
        paired=paired,
        kappa_direct=kappa_direct,
        kappa_pcf=kappa_pcf,
        agreement=annotator_agreement(labels),
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
    return compare_with_humans(decisions, labels, human, gold=gold)
