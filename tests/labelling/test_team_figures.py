"""Team figures: pace, agreement, kappa matrix, agreement per bucket, completion."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pcf.labelling.team_figures import (
    agreement_by_bucket,
    annotator_checks,
    completion,
    kappa_matrix,
    people,
    seconds_per_label,
)
from tests.factories import make_item

LABELS = pd.DataFrame(
    [
        ("q1", "ann", "a"),
        ("q1", "bob", "a"),
        ("q2", "ann", "a"),
        ("q2", "bob", "b"),
        ("q3", "ann", "b"),
        ("q3", "bob", "b"),
        ("q3", "cat", "a"),
        ("q4", "ann", "cannot_tell"),
        ("q4", "cat", "b"),
    ],
    columns=["item_key", "annotator", "choice"],
)


def at(*minutes: float) -> list[pd.Timestamp]:
    start = pd.Timestamp("2026-12-03T10:00:00Z")
    return [start + pd.Timedelta(minutes=m) for m in minutes]


def test_pace_is_the_median_gap_between_saves_without_pauses():
    assert seconds_per_label(at(0, 0.5, 1.5, 60, 60.25)) == pytest.approx(30)
    assert seconds_per_label(at(0)) is None


def test_each_person_agreement_with_the_others_and_with_resolved_gold():
    history = pd.DataFrame(
        {"annotator": ["ann"] * 5 + ["bob"] * 3 + ["cat"] * 2, "created_at": at(*range(10))}
    )
    table = people(LABELS, history, resolved={"q2": "b", "q3": "b"}).set_index("annotator")
    # ann: q1 agrees with bob (1), q2 disagrees (0), q3 agrees with bob, not cat (0.5).
    assert table.loc["ann", "agreement_with_others"] == pytest.approx(0.5)
    assert table.loc["ann", "shared_items"] == 3
    assert table.loc["ann", "agreement_with_resolved_gold"] == pytest.approx(0.5)
    assert table.loc["ann", "corrections"] == 1
    assert table.loc["cat", "agreement_with_others"] == pytest.approx(0.0)
    assert table.loc["bob", "median_seconds"] == pytest.approx(60)


CANDIDATES = {"q1": 4, "q2": 4, "q3": 2, "q4": 2}


def test_the_kappa_matrix_is_symmetric_and_corrected_for_chance_per_item():
    matrix = kappa_matrix(LABELS, CANDIDATES).set_index(["first", "second"])
    chance = (1 / 4 + 1 / 4 + 1 / 2) / 3  # ann and bob share q1, q2 and q3; agree on two
    ann_bob = (2 / 3 - chance) / (1 - chance)
    assert matrix.loc[("ann", "bob"), "kappa"] == pytest.approx(ann_bob)
    assert matrix.loc[("bob", "ann"), "kappa"] == pytest.approx(ann_bob)
    assert matrix.loc[("ann", "ann"), "kappa"] == 1.0
    assert math.isnan(matrix.loc[("ann", "cat"), "kappa"])  # one shared item only
    assert matrix.loc[("ann", "cat"), "items"] == 1


def test_agreement_per_bucket_counts_only_items_two_people_labelled():
    by_bucket = agreement_by_bucket(
        LABELS, CANDIDATES, {"q1": "x", "q2": "x", "q3": "y", "q4": "y"}
    ).set_index("bucket")
    assert list(by_bucket.index) == ["all", "x", "y"]
    assert list(by_bucket["items"]) == [3, 2, 1]  # q4's second label is "cannot tell"
    share, chance = (1 + 0 + 1 / 3) / 3, (1 / 4 + 1 / 4 + 1 / 2) / 3
    assert by_bucket.loc["all", "kappa"] == pytest.approx((share - chance) / (1 - chance))
    assert by_bucket.loc["x", "kappa"] == pytest.approx((1 / 2 - 1 / 4) / (3 / 4))


def test_completion_counts_items_by_the_labels_they_want():
    counts = completion(
        ["q1", "q2", "q3", "q4"],
        {"q1": 2, "q2": 1},
        dict.fromkeys(["q1", "q2", "q3", "q4"], 2),
        held=["q3"],
    )
    assert counts == {"complete": 1, "in_progress": 2, "untouched": 1}


def test_a_person_who_disagrees_with_everyone_is_flagged():
    """Ann and Bob agree on twelve two-candidate items, the right one listed first or second in
    turn; Cat always picks the other: agreement below chance, no favourite position."""
    items = {f"q{i}": make_item(f"q{i}", n=2) for i in range(12)}
    rows = []
    for i, key in enumerate(items):
        agreed, other = ("c0", "c1") if i % 2 else ("c1", "c0")
        rows += [(key, "ann", agreed), (key, "bob", agreed), (key, "cat", other)]
    current = pd.DataFrame(rows, columns=["item_key", "annotator", "choice"])
    checks = annotator_checks(current, items).set_index("annotator")
    assert checks["flag"].to_dict() == {"ann": "", "bob": "", "cat": "disagrees with everyone"}
    assert checks.loc["cat", "estimated_accuracy"] < 0.1
    assert checks.loc["ann", "estimated_accuracy"] > 0.9
