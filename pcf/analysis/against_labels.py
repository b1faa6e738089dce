"""A run measured against labels, as pages show it: the Overview's accuracy against gold and
human labels (a paired bootstrap) and review triage curves (random orders beside the review
orders), and the Adjudicate queue's calibrated chance that the judge is wrong. Each is kept in
the database per revision of the run's calls and of the dataset's labels: seconds of computing
on a large run, done once per change instead of on every visit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlmodel import Session

from pcf.analysis.results import accuracy_against, gold_answers, stored_analysis
from pcf.analysis.stored import decode, kept, kept_archive
from pcf.analysis.triage import (
    FEATURES,
    calibrated_priority,
    curve_frame,
    known_answers,
    random_baseline,
    summarize,
    table_triage,
)
from pcf.labelling.human_gold import dataset_gold
from pcf.store import Run

COMPARED = ("gold labels", "human labels")
TRIAGE_ORDERS = (("priority", "calibrated"), ("priority",))
"""The review orders the triage shows, the calibrated one only where it can be fitted."""
LABELLED_COLUMNS = ("item_id", "gold", "winner", "direct_winner", "priority", *FEATURES)
"""The decision table's columns that the figures against labels read (a large run's end holds
these alone while it computes them: half the table)."""


@dataclass(frozen=True)
class RunOverview:
    """A run's figures against labels: per :data:`COMPARED`,
    :func:`~pcf.analysis.results.accuracy_against` (None without such labels), and the triage's
    ``curves`` and ``triage`` figures with ``against`` (None without labels or for APOCJudge)."""

    comparisons: dict[str, dict[str, Any] | None]
    curves: pd.DataFrame | None
    triage: dict[str, Any] | None


def run_overview(run: Run, *, session: Session, table: pd.DataFrame | None = None) -> RunOverview:
    """The run's figures against labels, as stored for the current revision of its calls and
    labels (computed and stored first when missing or stale, from ``table``, the run's decision
    table when the caller holds it already; the caller commits)."""

    def compute() -> dict[str, Any]:
        decided = decision_table(run, table, session=session)
        human = dataset_gold(run.dataset_id, session=session)
        answers = {"gold labels": gold_answers(decided), "human labels": human.known()}
        parts: dict[str, Any] = {
            "comparisons": {name: accuracy_against(decided, answers[name]) for name in COMPARED}
        }
        against = "gold" if answers["gold labels"] else "humans"
        for orders in TRIAGE_ORDERS if run.protocol != "apoc" else ():
            known = answers["gold labels"] or human.gold
            try:
                curves, wrong, _ = table_triage(decided, known, orders=orders)
            except ValueError:
                continue
            baseline = random_baseline(wrong)  # drawn once for both
            parts["curves"] = curve_frame(curves, wrong, baseline=baseline)
            parts["triage"] = summarize(curves, wrong, baseline=baseline) | {"against": against}
            break
        return parts

    parts = kept(run, "overview", compute, session=session, labels=True)
    return RunOverview(parts["comparisons"], parts.get("curves"), parts.get("triage"))


def run_calibration(
    run: Run, *, session: Session, table: pd.DataFrame | None = None
) -> pd.Series | None:
    """Each item's calibrated chance that the judge is wrong
    (:func:`~pcf.analysis.triage.calibrated_priority` against gold, else human gold), as stored
    for the current revision of the run's calls and those answers (computed from ``table`` as
    :func:`run_overview` is); None without enough labels."""
    parts = decode(calibration_archive(run, session=session, table=table))
    if "p_wrong" not in parts:
        return None
    frame = parts["p_wrong"]
    return pd.Series(frame["p_wrong"].to_numpy(), index=frame["item_id"].to_numpy(), name="p_wrong")


def calibration_archive(run: Run, *, session: Session, table: pd.DataFrame | None) -> bytes:
    """:func:`run_calibration`'s stored archive, computed and stored first when missing; not
    decoded, for a caller that only stores it (a large run's end)."""
    decided = decision_table(run, table, session=session)
    answers = known_answers(decided, dataset_gold(run.dataset_id, session=session).gold)

    def compute() -> dict[str, Any]:
        try:
            chances = calibrated_priority(decided, answers)
        except ValueError:
            return {}
        return {"p_wrong": pd.DataFrame({"item_id": chances.index, "p_wrong": chances.to_numpy()})}

    # Refitted when the answers change, not at every label (most labels leave them as they were).
    return kept_archive(run, "calibration", compute, session=session, inputs=answers)


def decision_table(run: Run, table: pd.DataFrame | None, *, session: Session) -> pd.DataFrame:
    """``table``, else the run's stored decision table: a caller that holds it already spares
    a large run a second copy of it in memory."""
    return stored_analysis(run, session=session).table if table is None else table
