"""A gate on a stored run's reliability, for CI (``pcf check``) and for tests
(:func:`assert_reliable`), as docs/ci.md describes; every figure is read from what the pages
show (the run's stored decision table and its comparison with the human gold)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from pcf.analysis.agreement import table_human_comparison
from pcf.analysis.results import stored_analysis
from pcf.consensus import TIE_TOLERANCE
from pcf.labelling.human_gold import dataset_gold
from pcf.store import Run, current_labels, get_engine, get_run, session_scope

THRESHOLDS = ("max_order_unstable", "max_position_driven", "min_kappa", "min_accuracy")
"""Each threshold's name: its bound (``max`` or ``min``) and the figure it bounds."""


@dataclass(frozen=True)
class Check:
    """One threshold on a run; ``value`` is None where undefined (kappa when every label is the
    same candidate)."""

    figure: str
    value: float | None
    bound: str
    threshold: float
    passed: bool

    def line(self) -> str:
        """``order_unstable 0.1200 <= 0.2 pass``: the value, the bound and the outcome."""
        value = "undefined" if self.value is None else f"{self.value:.4f}"
        sign = "<=" if self.bound == "max" else ">="
        outcome = "pass" if self.passed else "FAIL"
        return f"{self.figure} {value} {sign} {self.threshold:g} {outcome}"


def check_run(run: Run, *, session: Session, **thresholds: float | None) -> list[Check]:
    """The run's figures against ``thresholds`` (names of :data:`THRESHOLDS`; None is no
    threshold), in that order. Flushes the decision table it keeps; the caller commits.

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
    values: dict[str, float | None] = {
        flag: float(table[flag].mean()) for flag in ("order_unstable", "position_driven")
    }
    if wanted.keys() & {"min_kappa", "min_accuracy"}:
        human = dataset_gold(run.dataset_id, session=session).gold
        labels = current_labels(run.dataset_id, session=session)
        comparison = table_human_comparison(table, labels, human)
        if comparison.paired is None:
            raise ValueError(
                f"kappa and accuracy are measured against human gold, and no item of run "
                f"{run.name!r} has any yet: label items on the Adjudicate page first"
            )
        values |= {"kappa": comparison.kappa_pcf, "accuracy": comparison.paired["method_accuracy"]}
    checks = []
    for name, threshold in wanted.items():
        bound, figure = name.split("_", 1)
        value = values[figure]
        sign = 1 if bound == "min" else -1
        passed = value is not None and sign * (value - threshold) >= -TIE_TOLERANCE
        checks.append(Check(figure, value, bound, threshold, passed))
    return checks


def assert_reliable(run_name: str, **thresholds: float | None) -> list[Check]:
    """:func:`check_run` for a test, on the database ``PCF_DATABASE_URL`` names.

    Raises:
        AssertionError: a threshold failed; the message has one line per check.
        ValueError: no such run, or :func:`check_run`'s errors.
    """
    with session_scope(get_engine()) as session:
        run = get_run(run_name, session=session)
        if run is None:
            raise ValueError(f"no run {run_name!r}; `pcf runs` lists them")
        checks = check_run(run, session=session, **thresholds)
    if not all(c.passed for c in checks):
        lines = "\n".join(c.line() for c in checks)
        raise AssertionError(f"run {run_name!r} fails its reliability gate:\n{lines}")
    return checks
