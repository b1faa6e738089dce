"""One colour per series, the same wherever it shows, for every chart of the pages and report."""

from __future__ import annotations

from collections.abc import Iterable

import altair as alt

from pcf.analysis.triage import RANDOM_SERIES
from pcf.analysis.whatif import ACCURACY, SAME_WINNER

SERIES_COLOURS: dict[str, str] = {
    "improved": "#2e7d32",
    "regressed": "#c62828",
    "same: both right": "#90a4ae",
    "same: both wrong": "#cfd8dc",
    "priority": "#1f77b4",
    "calibrated": "#9467bd",
    "top_entropy": "#ff7f0e",
    "margin": "#8c564b",
    "kendall_w": "#e377c2",
    "overrides": "#bcbd22",
    "random": "#6b7785",
    RANDOM_SERIES: "#6b7785",
    SAME_WINNER: "#1f77b4",
    ACCURACY: "#2e7d32",
}
"""The colour of each named series (review orders, paired outcomes, budget measures)."""
OTHER = "#17becf"
"""The colour of a series this module does not name."""


def series_scale(names: Iterable[str]) -> alt.Scale:
    """An Altair colour scale that gives each of ``names`` its colour of :data:`SERIES_COLOURS`."""
    shown = list(dict.fromkeys(names))
    return alt.Scale(domain=shown, range=[SERIES_COLOURS.get(name, OTHER) for name in shown])
