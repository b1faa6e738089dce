"""Altair charts (pcf/charts.py): each one plots exactly the frame it is given."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pcf.analysis.results import flag_counts, outcome_frame
from pcf.reports.charts import (
    HEATMAP_VALUES,
    flag_bars,
    metric_histogram,
    ordering_heatmap,
    outcome_bars,
    slot_share_bars,
)

HEATMAP = pd.DataFrame(
    {
        "ordering": ["e0·c0  A B C"] * 3 + ["e0·c1  C A B"] * 3,
        "execution": [0] * 6,
        "call_index": [0, 0, 0, 1, 1, 1],
        "candidate": ["A", "B", "C"] * 2,
        "candidate_id": ["x", "y", "z"] * 2,
        "slot": [1, 2, 3, 2, 3, 1],
        "rank": [1.0, 3.0, 2.0, 2.0, 3.0, 1.0],
        "factuality": [9.0, 2.0, 5.5, 6.0, 1.0, 8.0],
        "risk": [0.1, 0.8, 0.4, 0.3, 0.9, 0.2],
        "ok": [True] * 6,
    }
)


def data_of(spec: dict, layer: dict | None = None) -> list[dict]:
    """The inline rows a chart (or one of its layers) plots."""
    name = ((layer or {}).get("data") or spec["data"])["name"]
    return spec["datasets"][name]


def test_the_heatmap_plots_the_frame_coloured_by_rank():
    spec = ordering_heatmap(HEATMAP).to_dict()
    cells, labels = spec["layer"]
    assert data_of(spec) == HEATMAP.to_dict(orient="records")
    assert cells["mark"]["type"] == "rect"
    assert cells["encoding"]["color"]["field"] == "rank"
    assert cells["encoding"]["color"]["scale"]["domain"] == [3, 1]
    assert cells["encoding"]["x"]["sort"] == ["A", "B", "C"]
    assert cells["encoding"]["y"]["sort"] == ["e0·c0  A B C", "e0·c1  C A B"]
    assert labels["encoding"]["text"]["field"] == "rank"
    assert spec["height"] == {"step": 20}  # one 20-pixel row per ordering


def test_the_heatmap_can_show_factuality_instead():
    cells, labels = ordering_heatmap(HEATMAP, "factuality").to_dict()["layer"]
    assert cells["encoding"]["color"]["field"] == "factuality"
    assert cells["encoding"]["color"]["scale"]["domain"] == [0, 10]
    assert labels["encoding"]["text"]["format"] == ".1f"
    assert set(HEATMAP_VALUES) == {"rank", "factuality"}


def test_the_heatmap_refuses_an_unknown_value():
    with pytest.raises(ValueError, match="rank, factuality"):
        ordering_heatmap(HEATMAP, "risk")


def test_the_histogram_bins_the_known_values_of_one_column():
    table = pd.DataFrame({"priority": [0.1, 1.2, math.nan, 2.0], "other": [1, 2, 3, 4]})
    spec = metric_histogram(table, "priority", "review priority", step=0.25).to_dict()
    assert data_of(spec) == [
        {"start": 0.0, "end": 0.25, "items": 1},
        {"start": 1.0, "end": 1.25, "items": 1},
        {"start": 2.0, "end": 2.25, "items": 1},
    ]
    assert spec["encoding"]["x"]["bin"] == "binned"
    assert spec["encoding"]["x"]["title"] == "review priority"


def test_the_histogram_of_many_items_embeds_one_row_per_bin():
    table = pd.DataFrame({"top_agreement": [i / 20_000 for i in range(20_000)]})
    spec = metric_histogram(table, "top_agreement", "top agreement").to_dict()  # no MaxRowsError
    assert [row["items"] for row in data_of(spec)] == [2_000] * 10


def test_flag_bars_keep_the_flag_order():
    table = pd.DataFrame(
        {
            "order_unstable": [True, True, False],
            "overrides_direct": [True, False, False],
            "near_tie": [False, False, False],
            "position_driven": [False, False, True],
            "incomplete": [False, False, False],
        }
    )
    counts = flag_counts(table)
    spec = flag_bars(counts).to_dict()
    assert [row["items"] for row in data_of(spec)] == [2, 1, 0, 1, 0]
    assert spec["encoding"]["y"]["sort"] == list(counts["flag"])


def test_slot_bars_show_the_uniform_share():
    slots = pd.DataFrame(
        {
            "n": [4] * 4,
            "slot": [1, 2, 3, 4],
            "top_share": [0.4, 0.2, 0.2, 0.2],
            "top_count": [40, 20, 20, 20],
            "gold_recall": [0.9, 0.7, math.nan, 0.6],
        }
    )
    spec = slot_share_bars(slots).to_dict()
    bars, rule = spec["layer"]
    assert [row["slot"] for row in data_of(spec, bars)] == ["slot 1", "slot 2", "slot 3", "slot 4"]
    assert [row["top_share"] for row in data_of(spec, bars)] == [0.4, 0.2, 0.2, 0.2]
    assert data_of(spec, rule) == [{"share": 0.25}]
    assert rule["mark"]["type"] == "rule"


def test_outcome_bars_colour_each_outcome():
    outcomes = outcome_frame({"improved": 3, "regressed": 1, "both_right": 40, "both_wrong": 8})
    spec = outcome_bars(outcomes).to_dict()
    assert [(r["outcome"], r["items"]) for r in data_of(spec)] == [
        ("improved", 3),
        ("regressed", 1),
        ("same: both right", 40),
        ("same: both wrong", 8),
    ]
    assert spec["encoding"]["color"]["scale"]["domain"] == list(outcomes["outcome"])
