"""Altair charts of the pages and the report, each a pure function of one data frame."""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import pandas as pd

from pcf.reports.palette import series_scale

HEATMAP_VALUES = {
    "rank": "rank (1 = best)",
    "factuality": "factuality score (0-10)",
}
_ROW_HEIGHT = 20


def ordering_heatmap(frame: pd.DataFrame, value: str = "rank") -> alt.LayerChart:
    """Orderings (rows) by candidates (columns) of one item's ordering frame, coloured by
    ``rank`` (1 = best, darkest) or ``factuality`` (0-10, darkest = most factual)."""
    if value not in HEATMAP_VALUES:
        raise ValueError(f"value must be one of {', '.join(HEATMAP_VALUES)}, got {value!r}")
    orderings = list(dict.fromkeys(frame["ordering"]))
    candidates = list(dict.fromkeys(frame["candidate"]))
    n = len(candidates)
    if value == "rank":
        scale = alt.Scale(scheme="blues", domain=[n, 1])
        dark = alt.datum.rank <= (n + 1) / 2
    else:
        scale = alt.Scale(scheme="greens", domain=[0, 10])
        dark = alt.datum.factuality >= 5
    base = alt.Chart(frame).encode(
        x=alt.X("candidate:N", sort=candidates, title="candidate", axis=alt.Axis(labelAngle=0)),
        y=alt.Y(
            "ordering:N",
            sort=orderings,
            title="ordering: candidates by slot",
            axis=alt.Axis(
                labelFontSize=12, labelFont="monospace", labelLimit=400, labelOverlap=False
            ),
        ),
        tooltip=[
            alt.Tooltip("ordering:N"),
            alt.Tooltip("candidate:N"),
            alt.Tooltip("candidate_id:N", title="id"),
            alt.Tooltip("slot:Q"),
            alt.Tooltip("rank:Q"),
            alt.Tooltip("factuality:Q"),
            alt.Tooltip("risk:Q", title="hallucination risk"),
        ],
    )
    cells = base.mark_rect(stroke="white").encode(
        color=alt.Color(f"{value}:Q", scale=scale, title=HEATMAP_VALUES[value])
    )
    labels = base.mark_text(fontSize=12).encode(
        text=alt.Text(f"{value}:Q", format=".0f" if value == "rank" else ".1f"),
        color=alt.condition(dark, alt.value("white"), alt.value("black")),
    )
    return (cells + labels).properties(height=alt.Step(_ROW_HEIGHT))


def metric_histogram(
    table: pd.DataFrame, column: str, title: str, *, step: float = 0.1
) -> alt.Chart:
    """Items per bin of one metric column, counted here: Altair embeds at most 5,000 rows."""
    values = table[column].dropna().astype(float)
    starts = (values / step + 1e-9).apply(math.floor) * step  # 0.3 / 0.1 is bin 3, not 2
    bins = starts.round(10).value_counts().sort_index()
    frame = pd.DataFrame({"start": bins.index, "end": bins.index + step, "items": bins.to_numpy()})
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("start:Q", title=title, bin="binned"),
            x2="end:Q",
            y=alt.Y("items:Q", title="items"),
            tooltip=[
                alt.Tooltip("start:Q", title="from"),
                alt.Tooltip("end:Q", title="to"),
                alt.Tooltip("items:Q", title="items"),
            ],
        )
    )


def _item_bars(frame: pd.DataFrame, category: str, **encoding: Any) -> alt.Chart:
    """Items per ``category``, one bar each in the frame's order."""
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("items:Q", title="items"),
            y=alt.Y(f"{category}:N", sort=list(frame[category]), title=None),
            **encoding,
        )
    )


def flag_bars(counts: pd.DataFrame) -> alt.Chart:
    """Items per flag, from :func:`pcf.analysis.results.flag_counts`."""
    return _item_bars(counts, "flag", tooltip=["flag:N", "items:Q", "meaning:N"])


def slot_share_bars(slots: pd.DataFrame) -> alt.LayerChart:
    """Share of top picks per slot (slot bias of one ``n``), the uniform ``1/n`` dashed."""
    frame = slots.assign(slot=slots["slot"].map(lambda s: f"slot {s}"))
    uniform = pd.DataFrame({"share": [1 / frame["n"].iloc[0]]})
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("slot:N", title="slot the top pick was shown in", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("top_share:Q", title="share of top picks", axis=alt.Axis(format="%")),
            tooltip=[
                "slot:N",
                alt.Tooltip("top_share:Q", format=".1%", title="share"),
                alt.Tooltip("top_count:Q", title="calls"),
                alt.Tooltip("gold_recall:Q", format=".1%", title="gold recall"),
            ],
        )
    )
    rule = alt.Chart(uniform).mark_rule(strokeDash=[4, 4], color="gray").encode(y="share:Q")
    return bars + rule


def outcome_bars(outcomes: pd.DataFrame) -> alt.Chart:
    """Items improved, regressed and unchanged against direct, from
    :func:`pcf.analysis.results.outcome_frame`."""
    colours = series_scale(outcomes["outcome"])
    colour = alt.Color("outcome:N", scale=colours, legend=None)
    return _item_bars(outcomes, "outcome", color=colour, tooltip=["outcome:N", "items:Q"])


def paired_change_chart(changes: pd.DataFrame) -> alt.Chart:
    """Improved and regressed items per run against direct, from :func:`paired_changes`."""
    return (
        alt.Chart(changes)
        .mark_bar()
        .encode(
            y=alt.Y("run:N", title=None, sort=list(dict.fromkeys(changes["run"]))),
            yOffset=alt.YOffset("outcome:N", sort=["improved", "regressed"]),
            x=alt.X("items:Q", title="items", axis=alt.Axis(tickMinStep=1)),
            color=alt.Color(
                "outcome:N",
                scale=series_scale(["improved", "regressed"]),
                title=None,
            ),
            tooltip=["run:N", "outcome:N", "items:Q"],
        )
        .properties(width=480)
    )


def budget_chart(curve: pd.DataFrame) -> alt.Chart:
    """Agreement with the full run and accuracy against calls per item, one point per stopping
    policy, from :func:`pcf.analysis.whatif.budget_curve`."""
    return (
        alt.Chart(curve)
        .mark_line(point=True)
        .encode(
            x=alt.X("calls_per_item:Q", title="calls per item"),
            y=alt.Y("share:Q", title="share of items", scale=alt.Scale(zero=False)),
            color=alt.Color(
                "measure:N",
                scale=series_scale(curve["measure"]),
                title=None,
                legend=alt.Legend(orient="bottom", labelLimit=0),
            ),
            order="calls_per_item:Q",
            tooltip=[
                "policy:N",
                alt.Tooltip("calls_per_item:Q", format=".2f", title="calls per item"),
                "measure:N",
                alt.Tooltip("share:Q", format=".1%"),
            ],
        )
        .properties(height=280)
    )


def capture_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Error-capture curves (share of the judge's errors found against share of items
    reviewed) with the random order's band, from :func:`pcf.analysis.triage.curve_frame`."""
    axes = {
        "x": alt.X("reviewed:Q", title="share of items reviewed", axis=alt.Axis(format="%")),
        "y": alt.Y("captured:Q", title="errors found", axis=alt.Axis(format="%")),
    }
    band = (
        alt.Chart(frame.dropna(subset=["low"]))
        .mark_area(opacity=0.2, color="#9aa5b1")
        .encode(x=axes["x"], y="low:Q", y2="high:Q")
    )
    lines = (
        alt.Chart(frame)
        .mark_line()
        .encode(
            **axes,
            color=alt.Color(
                "order:N",
                scale=series_scale(frame["order"]),
                title=None,
                legend=alt.Legend(orient="bottom", labelLimit=0, columns=2),
            ),
            tooltip=[
                "order:N",
                alt.Tooltip("reviewed:Q", format=".0%"),
                alt.Tooltip("captured:Q", format=".0%"),
            ],
        )
    )
    return (band + lines).properties(width=420, height=300)


def reliability_chart(diagram: pd.DataFrame) -> alt.LayerChart:
    """The calibrated priority's reliability diagram (:func:`pcf.analysis.triage.reliability`);
    the diagonal is perfect calibration."""
    diagonal = (
        alt.Chart(pd.DataFrame({"p": [0.0, 1.0]}))
        .mark_line(strokeDash=[4, 4], color="#9aa5b1")
        .encode(x="p:Q", y="p:Q")
    )
    points = (
        alt.Chart(diagram)
        .mark_line(point=True)
        .encode(
            x=alt.X("mean predicted:Q", title="predicted chance the judge is wrong"),
            y=alt.Y("observed wrong:Q", title="observed share wrong"),
            tooltip=["bin:N", "items:Q", "mean predicted:Q", "observed wrong:Q"],
        )
    )
    return (diagonal + points).properties(width=320, height=320)
