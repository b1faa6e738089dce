"""The review list: filters, priority order and neighbours (pcf/analysis/item_list.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pcf.analysis.item_list import ADJUDICATED_FILTERS, filter_items, list_view, neighbours
from pcf.items import letter_labels
from tests.factories import decision_rows


def test_filters_combine_and_sort_most_doubtful_first():
    table = decision_rows(
        [
            {"priority": 0.5, "near_tie": True, "bucket": "b1"},
            {"priority": 1.5, "overrides_direct": True, "bucket": "b2"},
            {"priority": 1.5, "incomplete": True, "bucket": "b1"},
            {"priority": math.nan, "bucket": "b2"},
            {"priority": 0.1},
        ]
    )
    assert list(filter_items(table)["item_id"]) == ["i1", "i2", "i0", "i4", "i3"]
    assert list(filter_items(table, flags=["near_tie", "incomplete"])["item_id"]) == ["i2", "i0"]
    assert list(filter_items(table, overrides_only=True)["item_id"]) == ["i1"]
    assert list(filter_items(table, buckets=["b2"])["item_id"]) == ["i1", "i3"]
    labelled = {"i0", "i4"}
    assert list(filter_items(table, adjudicated="adjudicated", labelled=labelled)["item_id"]) == [
        "i0",
        "i4",
    ]
    rest = filter_items(table, adjudicated="not adjudicated", labelled=labelled)
    assert list(rest["item_id"]) == ["i1", "i2", "i3"]
    assert list(filter_items(table, matching={"i3", "i0"})["item_id"]) == ["i0", "i3"]
    assert filter_items(table, matching=set()).empty
    assert list(filter_items(table, flags=["near_tie"], buckets=["b2"])["item_id"]) == []
    assert "all" in ADJUDICATED_FILTERS
    with pytest.raises(ValueError, match="adjudicated must be one of"):
        filter_items(table, adjudicated="maybe")


def test_list_view_counts_labels_and_names_candidates_by_letter():
    rows = decision_rows([{"priority": 0.12345, "gold": "b"}, {"winner": None}])
    view = list_view(rows, {"i1": 2})
    assert list(view.columns) == [
        "item",
        "priority",
        "flags",
        "PCF winner",
        "direct winner",
        "gold",
        "bucket",
        "labels",
    ]
    assert list(view["labels"]) == [0, 2]
    assert view["priority"][0] == 0.123
    assert view["PCF winner"][0] == "A"
    assert pd.isna(view["PCF winner"][1])
    assert list(view["direct winner"]) == ["A", "A"]
    assert view["gold"][0] == "B"
    assert pd.isna(view["gold"][1])


def test_letters_follow_the_listing_order_and_number_beyond_26():
    assert letter_labels(["x", "y", "z"]) == {"x": "A", "y": "B", "z": "C"}
    many = letter_labels([f"c{i}" for i in range(27)])
    assert many["c0"] == "#1"
    assert many["c26"] == "#27"


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ("a", (None, "b")),
        ("b", ("a", "c")),
        ("c", ("b", None)),
        ("zz", (None, "a")),
        (None, (None, "a")),
    ],
)
def test_neighbours(current, expected):
    assert neighbours(["a", "b", "c"], current) == expected


def test_neighbours_of_an_empty_list():
    assert neighbours([], "a") == (None, None)
