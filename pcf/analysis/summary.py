"""The run's story in words, for the first screen of the Overview: what the consensus changed
and where people should look first."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

REVIEW_SHARE = 0.2
"""The share of the items the summary sends people to first (a reported point of the curves)."""


def summary_in_words(
    table: pd.DataFrame,
    stats: Mapping[str, Any] | None,
    against: str,
    triage: Mapping[str, Any] | None,
) -> list[str]:
    """Sentences a manager reads in 30 seconds, in Markdown, from a run's decision table, its
    :func:`~pcf.analysis.results.accuracy_against` ``stats`` (None without known answers) on
    what the answers are (``against``, e.g. ``"gold labels"``) and its
    :func:`~pcf.analysis.triage.summarize` figures (or None)."""
    changed = int(table["overrides_direct"].sum())
    sentences = [
        f"The consensus over the orderings changed **{changed} of {len(table)}** verdicts of "
        "the judge's first reading"
        + (
            f": **{stats['improved']} better, {stats['regressed']} worse** against {against}."
            if stats
            else "; no item has a gold or human label yet to say which verdict is right."
        )
    ]
    if stats:
        sentences.append(
            f"Accuracy against {against} ({stats['n']} items): "
            f"{stats['direct_accuracy']:.0%} for the first reading, "
            f"{stats['method_accuracy']:.0%} for the consensus "
            f"({stats['delta_points']:+.1f} points)."
        )
    if triage is None:
        return sentences
    shares = triage["orders"].get("priority", {}).get("caught_at", {})
    key = f"{REVIEW_SHARE:.0%}"
    if key in shares and triage["errors"]:
        first = math.ceil(REVIEW_SHARE * triage["items"])
        sentences.append(
            f"Review the **{first} most doubtful items first**: they hold "
            f"**{shares[key]:.0%} of the judge's {triage['errors']} errors** "
            f"(a random {first} hold about {triage['random']['caught_at'][key]:.0%})."
        )
    return sentences
