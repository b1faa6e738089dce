"""One colour per series: the colour scales in the chart specs of the pages and the report."""

from __future__ import annotations

import pandas as pd

from pcf.analysis.triage import ORDERS, RANDOM_SERIES, Curve, curve_frame
from pcf.analysis.whatif import ACCURACY, SAME_WINNER
from pcf.reports.charts import budget_chart, capture_chart, outcome_bars, paired_change_chart
from pcf.reports.palette import SERIES_COLOURS


def colours(spec: dict) -> dict[str, str]:
    """``{series: colour}`` of every colour scale with a domain in a Vega-Lite spec."""
    found: dict[str, str] = {}

    def walk(node) -> None:
        if isinstance(node, dict):
            scale = node.get("scale") if "field" in node else None
            if isinstance(scale, dict) and "domain" in scale and "range" in scale:
                for name, colour in zip(scale["domain"], scale["range"], strict=True):
                    assert found.setdefault(name, colour) == colour, name
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return found


def curves(orders: list[str]) -> pd.DataFrame:
    wrong = [True, False, True, False, False]
    made = [
        Curve(order, [i / 5 for i in range(6)], [0, 0.5, 0.5, 1, 1, 1], [0.6] * 6)
        for order in orders
    ]
    return curve_frame(made, wrong)


def test_each_series_has_one_colour_on_every_chart():
    outcomes = pd.DataFrame(
        {
            "outcome": ["improved", "regressed", "same: both right", "same: both wrong"],
            "items": [5, 2, 30, 15],
        }
    )
    changes = pd.DataFrame(
        {
            "run": ["a", "a", "b", "b"],
            "outcome": ["improved", "regressed"] * 2,
            "items": [1, 2, 3, 4],
        }
    )
    budget = pd.DataFrame(
        {
            "policy": ["p", "p"],
            "calls_per_item": [3.0, 3.0],
            "measure": [SAME_WINNER, ACCURACY],
            "share": [0.9, 0.8],
        }
    )
    charts = {
        "overview triage": capture_chart(curves(["priority", "calibrated"])),
        "report triage": capture_chart(curves(["priority"])),  # fewer series, other positions
        "outcomes": outcome_bars(outcomes),
        "paired changes": paired_change_chart(changes),
        "budget": budget_chart(budget),
    }
    seen: dict[str, str] = {}
    for name, chart in charts.items():
        scale = colours(chart.to_dict())
        assert scale, f"{name} has no colour scale of its own"
        for series, colour in scale.items():
            assert seen.setdefault(series, colour) == colour, (name, series)
            assert colour == SERIES_COLOURS[series]
        assert len(set(scale.values())) == len(scale), f"{name}: two series share a colour"
    assert {"priority", "calibrated", RANDOM_SERIES, "improved", "regressed"} <= set(seen)


def test_every_review_order_has_a_colour_unlike_the_others():
    named = [SERIES_COLOURS[order] for order in ORDERS if order != "random"]
    assert len(set(named)) == len(named)
    assert SERIES_COLOURS["random"] == SERIES_COLOURS[RANDOM_SERIES] not in named
