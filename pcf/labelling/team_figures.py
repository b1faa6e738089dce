"""A labelling team's figures: each person's progress, pace and agreement, completion, and
agreement corrected for chance per item (one over its candidates), over current labels
(``none_correct`` an answer, ``cannot_tell`` no label).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import timedelta
from itertools import combinations, pairwise
from typing import Any

import numpy as np
import pandas as pd

from pcf.evaluation import chance_corrected, rater_agreement
from pcf.items import CANNOT_TELL, Item
from pcf.labelling.human_gold import (
    HABIT_MIN_LABELS,
    dawid_skene,
    habitual,
    position_habits,
)

BREAK = timedelta(minutes=10)  # a longer gap between two labels is a pause, not labelling
MIN_SHARED_ITEMS = 2


def seconds_per_label(saved_at: Sequence[pd.Timestamp]) -> float | None:
    """The median time between a person's consecutive saves, pauses left out (or None)."""
    times = sorted(saved_at)
    gaps = [(b - a).total_seconds() for a, b in pairwise(times)]
    work = [g for g in gaps if g <= BREAK.total_seconds()]
    return float(np.median(work)) if work else None


def _usable(labels: pd.DataFrame) -> pd.DataFrame:
    return labels[labels["choice"] != CANNOT_TELL]


def people(
    labels: pd.DataFrame, history: pd.DataFrame, resolved: Mapping[str, str]
) -> pd.DataFrame:
    """One row per person from the current ``labels``, every label row (``history``,
    corrections included) and the ``resolved`` items' gold: labels, corrections, pace, and
    agreement with the others (per shared item, the share who chose the same) and with gold."""
    usable = _usable(labels)
    pairs = usable.merge(usable, on="item_key", suffixes=("", "_other"))
    pairs = pairs[pairs["annotator"] != pairs["annotator_other"]]
    agree = pairs["choice"] == pairs["choice_other"]
    shares = agree.groupby([pairs["annotator"], pairs["item_key"]]).mean().groupby(level=0)
    gold = usable["item_key"].map(resolved)
    right = (usable["choice"] == gold)[gold.notna()].groupby(usable["annotator"])
    saves = history.groupby("annotator")["created_at"]
    pace = saves.agg(lambda at: seconds_per_label(list(pd.to_datetime(at))))
    names = pd.Series(sorted(labels["annotator"].unique()), dtype=object)
    current = names.map(labels["annotator"].value_counts())
    return pd.DataFrame(
        {
            "annotator": names,
            "labels": current,
            "corrections": names.map(saves.size()).fillna(0).astype(int) - current,
            "median_seconds": names.map(pace),
            "agreement_with_others": names.map(shares.mean()),
            "shared_items": names.map(shares.size()).fillna(0).astype(int),
            "agreement_with_resolved_gold": names.map(right.mean()),
            "resolved_items": names.map(right.size()).fillna(0).astype(int),
        }
    )


CHECK_COLUMNS = ("annotator", "estimated_accuracy", "favourite_position_share", "flag")


def annotator_checks(labels: pd.DataFrame, items: Mapping[str, Item]) -> pd.DataFrame:
    """Each person's Dawid-Skene accuracy estimate and what looks wrong with their labels
    (:data:`CHECK_COLUMNS`; the flags: docs/reviewing.md, "Gold"). ``favourite_position_share``
    counts positions as shown to them or as listed (:func:`position_habits`); one who answers one
    position is never trusted by :func:`dawid_skene`.
    """
    usable = _usable(labels)
    usable = usable[usable["item_key"].isin(list(items))]
    _, skills = dawid_skene(usable, items)
    habits, flagged = position_habits(usable, items), habitual(usable, items)
    usable = usable.assign(chance=[1 / len(items[k].candidates) for k in usable["item_key"]])
    pairs = usable.merge(usable[["item_key", "annotator", "choice"]], on="item_key")
    pairs = pairs[pairs["annotator_x"] != pairs["annotator_y"]]
    by_pair = (
        pairs.assign(agree=pairs["choice_x"] == pairs["choice_y"])
        .groupby(["annotator_x", "annotator_y"])
        .agg(agree=("agree", "mean"), chance=("chance", "mean"), items=("agree", "size"))
    )
    by_pair = by_pair[by_pair["items"] >= HABIT_MIN_LABELS]
    below = (by_pair["agree"] <= by_pair["chance"]).groupby(level=0).all()
    contrary = set(below.index[below])
    rows = []
    for person in sorted(labels["annotator"].unique()):
        flag = ""
        if person in flagged:
            flag = "answers one position"
        elif person in contrary:
            flag = "disagrees with everyone"
        rows.append((person, skills.get(person), habits.get(person, math.nan), flag))
    return pd.DataFrame(rows, columns=list(CHECK_COLUMNS))


def kappa_matrix(labels: pd.DataFrame, candidates: Mapping[str, int]) -> pd.DataFrame:
    """Chance-corrected agreement (:func:`pcf.evaluation.chance_corrected`, chance one over an
    item's ``candidates``) of every pair of people over the items both labelled (NaN where
    undefined or under two shared items), 1 on the diagonal: ``first``, ``second``, ``kappa``,
    ``items``."""
    usable = _usable(labels)
    names = sorted(labels["annotator"].unique())
    table = usable.pivot(index="item_key", columns="annotator", values="choice")
    rows = [
        {"first": n, "second": n, "kappa": 1.0, "items": int(table[n].notna().sum())}
        for n in names
        if n in table
    ]
    for first, second in combinations(names, 2):
        both = table[[first, second]].dropna() if {first, second} <= set(table) else table[[]]
        value = math.nan
        if len(both) >= MIN_SHARED_ITEMS:
            same = list(both[first] == both[second])
            kappa = chance_corrected(same, [candidates[k] for k in both.index]).kappa
            value = math.nan if kappa is None else kappa
        for a, b in ((first, second), (second, first)):
            rows.append({"first": a, "second": b, "kappa": value, "items": len(both)})
    return pd.DataFrame(rows, columns=["first", "second", "kappa", "items"])


def agreement_by_bucket(
    labels: pd.DataFrame, candidates: Mapping[str, int], buckets: Mapping[str, str | None]
) -> pd.DataFrame:
    """Chance-corrected agreement of everyone (:func:`pcf.evaluation.rater_agreement`) per
    bucket, the whole set first: ``bucket``, ``items`` (those two people or more labelled, the
    only ones it counts) and ``kappa`` (NaN without such an item)."""

    def row(bucket: str, part: pd.DataFrame) -> dict[str, Any]:
        choices = _usable(part).groupby("item_key")["choice"].agg(list)
        shared = choices[choices.map(len) >= 2]
        kappa = None
        if len(shared):
            kappa = rater_agreement(list(shared), [candidates[k] for k in shared.index]).kappa
        return {
            "bucket": bucket,
            "items": len(shared),
            "kappa": math.nan if kappa is None else kappa,
        }

    rows = [row("all", labels)]
    keyed = labels.assign(bucket=labels["item_key"].map(buckets))
    rows += [row(str(b), part) for b, part in keyed.dropna(subset=["bucket"]).groupby("bucket")]
    return pd.DataFrame(rows, columns=["bucket", "items", "kappa"])


def completion(
    item_keys: Sequence[str],
    labellers: Mapping[str, int],
    wanted: Mapping[str, int],
    held: Sequence[str] = (),
) -> dict[str, int]:
    """How many items are ``complete``, ``in_progress`` (some labels, or held) and ``untouched``."""
    counts = {"complete": 0, "in_progress": 0, "untouched": 0}
    held_items = set(held)
    for key in item_keys:
        given = labellers.get(key, 0)
        if given >= wanted[key]:
            counts["complete"] += 1
        elif given or key in held_items:
            counts["in_progress"] += 1
        else:
            counts["untouched"] += 1
    return counts
