"""What the Overview shows of a run against labels: its accuracy against gold and human labels
(a paired bootstrap) and the review triage's curves (random orders beside the review orders),
kept in the database per revision of the run's calls and of the dataset's labels: seconds of
computing on a large run, done once per change instead of on every visit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlmodel import Session

from pcf.analysis.gold import dataset_gold
from pcf.analysis.results import accuracy_against, gold_answers, stored_analysis
from pcf.analysis.stored import kept
from pcf.analysis.triage import curve_frame, summarize, table_triage
from pcf.store.models import Run

COMPARED = ("gold labels", "human labels")
TRIAGE_ORDERS = (("priority", "calibrated"), ("priority",))
"""The review orders the triage shows, the calibrated one only where it can be fitted."""


@dataclass(frozen=True)
class RunOverview:
    """A run's figures against labels.

    Attributes:
        comparisons: per :data:`COMPARED`, :func:`~pcf.analysis.results.accuracy_against`
            on the items with such a label (None without any).
        curves: the triage's :func:`~pcf.analysis.triage.curve_frame`, None without labels or
            for an APOCJudge run.
        triage: the triage's :func:`~pcf.analysis.triage.summarize` figures plus ``against``
            (``gold`` or ``humans``); None when ``curves`` is.
    """

    comparisons: dict[str, dict[str, Any] | None]
    curves: pd.DataFrame | None
    triage: dict[str, Any] | None


def run_overview(run: Run, *, session: Session) -> RunOverview:
    """The run's figures against labels, as stored for the current revision of its calls and
    labels (computed and stored first when missing or stale; the caller commits)."""

    def compute() -> dict[str, Any]:
        table = stored_analysis(run, session=session).table
        human = dataset_gold(run.dataset_id, session=session)
        answers = {"gold labels": gold_answers(table), "human labels": human.known()}
        parts: dict[str, Any] = {
            "comparisons": {name: accuracy_against(table, answers[name]) for name in COMPARED}
        }
        against = "gold" if answers["gold labels"] else "humans"
        for orders in TRIAGE_ORDERS if run.protocol != "apoc" else ():
            known = answers["gold labels"] or human.gold
            try:
                curves, wrong, _ = table_triage(table, known, orders=orders)
            except ValueError:
                continue
            parts["curves"] = curve_frame(curves, wrong)
            parts["triage"] = summarize(curves, wrong) | {"against": against}
            break
        return parts

    parts = kept(run, "overview", compute, session=session, labels=True)
    return RunOverview(parts["comparisons"], parts.get("curves"), parts.get("triage"))
