"""A gate on a stored run's reliability, for CI (``pcf check``) and for tests
(:func:`assert_reliable`), as docs/ci.md describes; every figure is read from what the pages
show (the run's stored decision table and its comparison with the human gold)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from sqlmodel import Session

from pcf.analysis.agreement import table_human_comparison
from pcf.analysis.results import is_adaptive, stored_analysis
from pcf.consensus import TIE_TOLERANCE
from pcf.evaluation import FEW_ITEMS
from pcf.labelling.human_gold import dataset_gold
from pcf.store import Run, current_labels, get_engine, get_run, session_scope

THRESHOLDS = (
    *("max_failed", "max_order_unstable", "max_position_driven", "min_kappa", "min_accuracy"),
)
"""Each threshold's name: its bound (``max`` or ``min``) and the figure it bounds;
``max_failed`` bounds two figures, the share of failed calls and of incomplete items."""
MAX_FAILED = 0.05
"""``pcf check``'s default ``max_failed``."""
MIN_ITEMS = FEW_ITEMS
"""The fewest items (calls, for the failed share) a figure is accepted on, by default: what the
pages call too few (:data:`pcf.evaluation.FEW_ITEMS`)."""


@dataclass(frozen=True)
class Check:
    """One threshold on a run: ``value`` over ``n`` ``unit`` (items or calls), None where
    undefined (fewer than the least ``n`` accepted, or chance agreement with every label the
    same), which fails."""

    figure: str
    value: float | None
    bound: str
    threshold: float
    passed: bool
    n: int
    unit: str = "items"

    def line(self) -> str:
        """``order_unstable 0.1200 <= 0.2 pass (n=180 items)``: the value, the bound, the
        outcome and what the value was measured on."""
        value = "undefined" if self.value is None else f"{self.value:.4f}"
        sign = "<=" if self.bound == "max" else ">="
        outcome = "pass" if self.passed else "FAIL"
        return f"{self.figure} {value} {sign} {self.threshold:g} {outcome} (n={self.n} {self.unit})"


def _failures(
    run: Run, table: pd.DataFrame
) -> tuple[pd.Series, dict[str, tuple[float | None, int]]]:
    """Which items are complete (every planned call made and ok: a full run plans K calls per
    execution, an adaptive run the calls before its stop), and the failed-call and
    incomplete-item shares with the calls and items they count."""
    planned = table["n_calls"] if is_adaptive(run) else run.k * run.executions
    complete = ~table["incomplete"] & (table["n_ok"] >= planned) & (table["n_ok"] > 0)
    calls = int(table["n_calls"].sum())
    failed = calls - int(table["n_ok"].sum())
    shares: dict[str, tuple[float | None, int]] = {
        "failed_calls": (failed / calls if calls else 1.0, calls),
        "incomplete": (float(1 - complete.mean()), len(table)),
    }
    return complete, shares


def check_run(
    run: Run, *, session: Session, min_items: int = MIN_ITEMS, **thresholds: float | None
) -> list[Check]:
    """The run's figures against ``thresholds`` (names of :data:`THRESHOLDS`; None is no
    threshold), in that order. Order instability and position-driven shares count only complete
    items with two judgments or more (one judgment is neither stable nor unstable); a figure on
    fewer than ``min_items`` items (calls) is undefined and fails. Flushes the decision table it
    keeps; the caller commits.

    Raises:
        ValueError: an unknown name, no threshold, a run with no decided item, or a kappa or
            accuracy threshold on a dataset whose items have no human gold.
    """
    if unknown := sorted(set(thresholds) - set(THRESHOLDS)):
        raise ValueError(f"unknown threshold {unknown[0]!r}; choose from {', '.join(THRESHOLDS)}")
    wanted = {n: value for n in THRESHOLDS if (value := thresholds.get(n)) is not None}
    if not wanted:
        raise ValueError(f"give at least one threshold: {', '.join(THRESHOLDS)}")
    table = stored_analysis(run, session=session).table
    if table.empty:
        raise ValueError(f"run {run.name!r} has no decided item to check")
    complete, values = _failures(run, table)
    measured = table[complete & (table["n_ok"] >= 2)]
    for flag in ("order_unstable", "position_driven"):
        values[flag] = (float(measured[flag].mean()) if len(measured) else None, len(measured))
    if wanted.keys() & {"min_kappa", "min_accuracy"}:
        human = dataset_gold(run.dataset_id, session=session).gold
        labels = current_labels(run.dataset_id, session=session)
        comparison = table_human_comparison(table, labels, human)
        if comparison.paired is None:
            raise ValueError(
                f"kappa and accuracy are measured against human gold, and no item of run "
                f"{run.name!r} has any yet: label items on the Adjudicate page first"
            )
        pcf = comparison.pcf
        assert pcf is not None  # with paired figures, PCF's agreement is measured
        values |= {"kappa": (pcf.kappa, pcf.n), "accuracy": (pcf.share, pcf.n)}
    checks = []
    for name, threshold in wanted.items():
        bound, figure = name.split("_", 1)
        for shown in ("failed_calls", "incomplete") if figure == "failed" else (figure,):
            value, n = values[shown]
            unit = "calls" if shown == "failed_calls" else "items"
            if n < min_items:
                value = None
            sign = 1 if bound == "min" else -1
            passed = value is not None and sign * (value - threshold) >= -TIE_TOLERANCE
            checks.append(Check(shown, value, bound, threshold, passed, n, unit))
    return checks


def assert_reliable(
    run_name: str, *, min_items: int = MIN_ITEMS, **thresholds: float | None
) -> list[Check]:
    """:func:`check_run` for a test, on the database ``PCF_DATABASE_URL`` names.

    Raises:
        AssertionError: a threshold failed; the message has one line per check.
        ValueError: no such run, or :func:`check_run`'s errors.
    """
    with session_scope(get_engine()) as session:
        run = get_run(run_name, session=session)
        if run is None:
            raise ValueError(f"no run {run_name!r}; `pcf runs` lists them")
        checks = check_run(run, session=session, min_items=min_items, **thresholds)
    if not all(c.passed for c in checks):
        lines = "\n".join(c.line() for c in checks)
        raise AssertionError(f"run {run_name!r} fails its reliability gate:\n{lines}")
    return checks
