"""Review triage that pays off: how many of the judge's errors each share of human review finds
(the error-capture and budget curves, beside a seeded random baseline), for runs and for
recorded pairwise judges; docs/triage.md says how each figure is defined.

An order by a score reviews equal scores in a random order, averaged exactly as the random
baseline is: within a run of equal scores, each item reviewed finds that run's share of errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sqlmodel import Session

from pcf.analysis.results import analyse_run, gold_answers
from pcf.connectors.recordings import FIRST, SECOND, RecordedPair
from pcf.labelling.human_gold import dataset_gold
from pcf.store import Run

ORDERS = ("priority", "top_entropy", "margin", "kendall_w", "overrides", "calibrated", "random")
"""Orders of a run's items: the review priority, one instability metric, or the calibrated
model (most doubtful first), or a seeded random order."""
ABSTENTIONS = ("apart", "errors")
"""How :func:`pair_triage` treats a single call's abstention: counted apart and left out of
the curves (it is found without review), or an error in the curves, reviewed first."""
PAIR_TIERS = ("opposite verdict", "swapped call tie or none", "same verdict")
"""The review order of pairs whose single call picked a side, by what the swapped call said."""
FEATURES = (
    *("top_agreement", "top_entropy", "kendall_w", "margin"),
    *("overrides_direct", "near_tie", "position_driven", "incomplete"),
)
"""The instability metrics and flags the calibrated model reads."""
REPORTED_SHARES = (0.1, 0.2, 0.3)
RANDOM_DRAWS = 200
RANDOM_SERIES = "random (mean, 5-95% band)"  # the random baseline's name in a curve frame
FOLDS = 5
RIDGE = 0.01
NEWTON_STEPS = 100
"""Newton steps of the calibrated model's fit at most (it converges in about ten)."""
NEWTON_BLOCK = 8192
"""Rows of the design weighted at a time in the fit's Newton step."""
RELIABILITY_BINS = 5
CHART_POINTS = 400
"""Points per curve in a chart frame at most: a chart carries a few thousand rows whatever the
number of items (Altair refuses to embed more than 5,000)."""


@dataclass(frozen=True)
class Curve:
    """The two curves of one review ``order``: per share of items ``reviewed`` (0 to 1 in steps
    of 1/n), the share of the judge's errors ``captured`` and the ``accuracy`` once corrected."""

    order: str
    reviewed: np.ndarray
    captured: np.ndarray
    accuracy: np.ndarray

    def at(self, share: float) -> float:
        """The share of errors caught after reviewing ``share`` of the items (rounded down)."""
        return float(self.captured[math.floor(share * (len(self.reviewed) - 1) + 1e-9)])

    @property
    def capture_auc(self) -> float:
        """Area under the error-capture curve (0.5 for a random order on average)."""
        return float(np.trapezoid(self.captured, self.reviewed))

    @property
    def accuracy_auc(self) -> float:
        """Area under the budget curve."""
        return float(np.trapezoid(self.accuracy, self.reviewed))


def curve(order: str, wrong: Sequence[bool], ranking: Sequence[int]) -> Curve:
    """The curves of reviewing items in ``ranking`` (item positions, first reviewed first);
    ValueError unless ``ranking`` lists every item once."""
    n = len(wrong)
    if n == 0 or sorted(ranking) != list(range(n)):
        raise ValueError("a review order must list every item once")
    doubt = np.empty(n)
    doubt[list(ranking)] = np.arange(n, 0, -1)  # the first reviewed the most doubtful
    return doubt_curve(order, wrong, doubt)


def doubt_curve(order: str, wrong: Sequence[bool], scores: Sequence[float] | np.ndarray) -> Curve:
    """The curves of reviewing items by descending score (unknown, NaN, scores last), averaged
    over every order of equal scores: within a run of equal scores the errors are found at the
    run's rate, so no listing order (which may carry a pattern) decides them.

    Raises:
        ValueError: no items, or not one score per item.
    """
    wrong_array = np.asarray(wrong, dtype=bool)
    values = np.asarray(scores, dtype=float)
    n = len(wrong_array)
    if n == 0 or len(values) != n:
        raise ValueError("a review order needs one score per item")
    key = np.where(np.isnan(values), -np.inf, values)
    caught = np.zeros(n + 1)
    done = 0
    for level in np.unique(key)[::-1]:
        tier = key == level
        size, found = int(tier.sum()), int(wrong_array[tier].sum())
        caught[done + 1 : done + size + 1] = caught[done] + found * np.arange(1, size + 1) / size
        done += size
    errors = int(wrong_array.sum())
    captured = caught / errors if errors else np.ones(n + 1)
    return Curve(order, np.arange(n + 1) / n, captured, (n - errors + caught) / n)


def random_baseline(wrong: Sequence[bool], *, seed: int = 0) -> dict[str, Any]:
    """The random order's curves: the mean and the 5th-95th percentile band over
    :data:`RANDOM_DRAWS` seeded random orders at the chart's review positions
    (:func:`chart_positions`, each draw's curve kept there alone: memory for one draw whatever
    the number of items), with ``reviewed`` at those positions."""
    wrong_array = np.asarray(wrong, dtype=bool)
    n = len(wrong_array)
    if n == 0:
        raise ValueError("a review order must list every item once")
    rng = np.random.default_rng(seed)
    errors = int(wrong_array.sum())
    reviewed = np.arange(n + 1) / n
    positions = chart_positions(n)
    caught = np.zeros((RANDOM_DRAWS, len(positions)), dtype=np.int32)
    auc, at = [], []
    drawn = np.zeros(n + 1, dtype=np.int32)
    for draw in range(RANDOM_DRAWS):
        np.cumsum(wrong_array[rng.permutation(n)], out=drawn[1:])
        caught[draw] = drawn[positions]
        row = drawn / errors if errors else np.ones(n + 1)
        curve = Curve("random", reviewed, row, reviewed)
        auc.append(curve.capture_auc)
        at.append([curve.at(share) for share in REPORTED_SHARES])
    captured = caught / errors if errors else np.ones(caught.shape)
    low, high = np.percentile(captured, (5, 95), axis=0)
    shares = np.array(at)
    return {
        "captured_mean": captured.mean(axis=0),
        "captured_low": low,
        "captured_high": high,
        "capture_auc": float(np.mean(auc)),
        "reviewed": reviewed[positions],
        "at": {share: float(np.mean(shares[:, i])) for i, share in enumerate(REPORTED_SHARES)},
        "band_at": {
            share: tuple(float(np.percentile(shares[:, i], q)) for q in (5, 95))
            for i, share in enumerate(REPORTED_SHARES)
        },
    }


def chart_positions(n: int) -> np.ndarray:
    """The review positions (0 to ``n`` items reviewed) a chart of ``n`` items shows: at most
    :data:`CHART_POINTS` + 1, evenly spaced, both ends included."""
    points = np.linspace(0, n, min(n, CHART_POINTS) + 1)
    return np.unique(points.round()).astype(int)


def item_scores(table: pd.DataFrame, order: str) -> np.ndarray:
    """Each item's doubt under ``order`` (higher = reviewed first), from a decision table
    (:attr:`pcf.analysis.results.RunAnalysis.table`)."""
    if order in ("priority", "top_entropy"):
        return table[order].to_numpy(dtype=float)
    if order in ("margin", "kendall_w"):  # agreement: the lowest first
        return -table[order].to_numpy(dtype=float)
    if order == "overrides":
        priority = table["priority"].to_numpy(dtype=float)
        return table["overrides_direct"].astype(float).to_numpy() + priority / 10
    raise ValueError(f"unknown order {order!r}; choose one of {', '.join(ORDERS)}")


def pair_triage(
    pairs: Sequence[RecordedPair], *, seed: int = 0, abstentions: str = "apart"
) -> dict[str, Any]:
    """Does reviewing pairs by swap disagreement find the single call's errors (the call with the
    pair in its first order) first? Pairs with a verdict are reviewed in :data:`PAIR_TIERS`
    order, randomly within a tier (:func:`doubt_curve`), beside the random baseline.

    Raises:
        ValueError: an unknown ``abstentions``, or no pair in the curves.
    """
    if abstentions not in ABSTENTIONS:
        raise ValueError(f"abstentions must be one of {', '.join(ABSTENTIONS)}")
    decided = [p for p in pairs if p.d1 in (FIRST, SECOND)]
    abstained = [p for p in pairs if p.d1 not in (FIRST, SECOND)]
    if not decided and (abstentions == "apart" or not abstained):
        raise ValueError("no pair has a verdict from its first-order call: nothing to triage")
    wrong = [p.d1 != p.label for p in decided]
    tiers = [
        PAIR_TIERS[1] if p.d2 not in (FIRST, SECOND) else PAIR_TIERS[0 if p.d2 != p.d1 else 2]
        for p in decided
    ]
    doubt = [len(PAIR_TIERS) - PAIR_TIERS.index(t) for t in tiers]
    counted = abstained if abstentions == "errors" else []
    curve_wrong = wrong + [True] * len(counted)
    curve_doubt = doubt + [len(PAIR_TIERS) + 1] * len(counted)
    figures = summarize(
        [doubt_curve("swap_disagreement", curve_wrong, curve_doubt)], curve_wrong, seed=seed
    )
    return {
        "judge": "the first-order call alone (order 1)",
        "abstentions": len(abstained),
        "abstentions_counted": abstentions,
        "abstentions_note": "a tie or no verdict from that call: "
        + (
            "counted as errors in the curves, reviewed first"
            if abstentions == "errors"
            else "found without review, so counted apart and left out of the curves"
        ),
        **figures,
        "tiers": [
            {
                "tier": tier,
                "pairs": tiers.count(tier),
                "errors": sum(w for w, t in zip(wrong, tiers, strict=True) if t == tier),
            }
            for tier in PAIR_TIERS
        ],
    }


def _fit_predict(x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Probabilities for the ``test`` rows of a ridge logistic regression fitted on the ``train``
    rows: the coefficients (a constant and the standardised features) that minimise the mean
    negative log-likelihood plus ``RIDGE / 2`` times their squared length, the objective of
    statsmodels' ``GLM(...).fit_regularized(alpha=RIDGE, L1_wt=0)``. Found by Newton's method
    with step halving, a block of rows at a time: no temporary as large as the design."""
    from scipy.special import expit  # noqa: PLC0415 - scipy loads slowly

    design = x[train]  # a copy, standardised in place
    mean = design.mean(axis=0)
    design -= mean
    scale = np.sqrt(np.einsum("ij,ij->j", design, design) / len(design))
    scale[scale == 0] = 1.0
    design /= scale
    target = y[train]

    def objective(beta: np.ndarray, z: np.ndarray) -> float:
        """The penalised mean negative log-likelihood at ``beta``, whose linear predictor is
        ``z``."""
        return float(np.mean(np.logaddexp(0.0, z) - target * z) + RIDGE / 2 * beta @ beta)

    def predictor(beta: np.ndarray) -> np.ndarray:
        return beta[0] + design @ beta[1:]

    beta = np.zeros(design.shape[1] + 1)
    z = predictor(beta)
    for _ in range(NEWTON_STEPS):
        p = expit(z)
        residual = p - target
        gradient = np.concatenate(([residual.mean()], design.T @ residual / len(design)))
        gradient += RIDGE * beta
        hessian = np.diag(np.full(len(beta), RIDGE))
        weight = p * (1 - p) / len(design)
        hessian[0, 0] += weight.sum()
        for start in range(0, len(design), NEWTON_BLOCK):
            block, w = design[start : start + NEWTON_BLOCK], weight[start : start + NEWTON_BLOCK]
            weighted = block * w[:, None]
            hessian[0, 1:] += weighted.sum(axis=0)
            hessian[1:, 1:] += block.T @ weighted
        hessian[1:, 0] = hessian[0, 1:]
        step, before, size = np.linalg.solve(hessian, gradient), objective(beta, z), 1.0
        while True:  # halve the step until it does not make the objective worse
            trial = beta - size * step
            z = predictor(trial)  # kept for the next step's probabilities
            if objective(trial, z) <= before or size <= 1e-8:
                break
            size /= 2
        beta = trial
        if np.abs(size * step).max() < 1e-10:
            break
    rows = x[test]
    rows -= mean
    rows /= scale
    return expit(beta[0] + rows @ beta[1:])


def feature_matrix(table: pd.DataFrame) -> np.ndarray:
    """The :data:`FEATURES` of a decision table's rows as floats, a column at a time (a float
    copy of the frame first would hold the matrix twice)."""
    return np.column_stack(
        [table[name].to_numpy(dtype=float, na_value=np.nan) for name in FEATURES]
    )


def calibrated_scores(
    features: pd.DataFrame, wrong: Sequence[bool], *, seed: int = 0
) -> np.ndarray:
    """Out-of-fold probabilities that the judge is wrong, from :data:`FEATURES` (a ridge logistic
    GLM, seeded folds); an item whose metrics are unknown (no usable call) gets 1.

    Raises:
        ValueError: fewer than two labelled items of each kind (wrong and right).
    """
    y = np.asarray(wrong, dtype=float)
    if min(y.sum(), len(y) - y.sum()) < 2:
        raise ValueError("the calibrated priority needs at least two right and two wrong items")
    x = feature_matrix(features)
    known = ~np.isnan(x).any(axis=1)
    out = np.ones(len(y))
    fold = np.random.default_rng(seed).permutation(len(y)) % FOLDS
    for f in range(FOLDS):
        train, test = known & (fold != f), known & (fold == f)
        if test.any():
            out[test] = _fit_predict(x, y, train, test)
    return out


def calibrated_priority(
    table: pd.DataFrame, answers: Mapping[str, str | None], *, seed: int = 0
) -> pd.Series:
    """P(the judge is wrong) for every item of a decision table, as an adjudication order: out
    of fold for the items with an answer, from the model fitted on all of them for the rest
    (:func:`calibrated_scores`' errors)."""
    known = answers_of(table, answers, ["item_id", "winner", *FEATURES])  # one copy, not two
    out_of_fold = calibrated_scores(known, list(known["wrong"]), seed=seed)
    x = feature_matrix(table)
    unknown = np.isnan(x).any(axis=1)
    keys = table["item_id"].to_numpy()
    row = pd.Index(known["item_id"]).get_indexer(keys)  # each item's row in known, or -1
    answered = row >= 0
    y = np.where(answered, known["wrong"].to_numpy(dtype=float)[row], 0.0)
    predicted = (  # fitted only when an item without an answer has metrics to predict from
        _fit_predict(np.nan_to_num(x), y, answered & ~unknown, np.ones(len(x), dtype=bool))
        if (~answered & ~unknown).any()
        else 1.0
    )
    values = np.where(answered, out_of_fold[row], np.where(unknown, 1.0, predicted))
    return pd.Series(values, index=keys, name="p_wrong")


def reliability(probabilities: Sequence[float] | np.ndarray, wrong: Sequence[bool]) -> pd.DataFrame:
    """The reliability diagram's data: per bin of predicted probability, the items, the mean
    prediction and the observed share of errors."""
    frame = pd.DataFrame({"predicted": probabilities, "wrong": np.asarray(wrong, dtype=float)})
    edges = np.linspace(0, 1, RELIABILITY_BINS + 1)
    frame["bin"] = pd.cut(frame["predicted"], edges, include_lowest=True)
    grouped = frame.groupby("bin", observed=True)
    return pd.DataFrame(
        {
            "bin": [str(b) for b in grouped.groups],
            "items": grouped.size().to_numpy(),
            "mean predicted": grouped["predicted"].mean().to_numpy(),
            "observed wrong": grouped["wrong"].mean().to_numpy(),
        }
    )


def summarize(
    curves: Sequence[Curve],
    wrong: Sequence[bool],
    *,
    seed: int = 0,
    baseline: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The figures of some review orders beside the random baseline (``baseline``, else
    :func:`random_baseline` of ``seed``), as JSON-ready values."""
    baseline = baseline or random_baseline(wrong, seed=seed)
    return {
        "items": len(wrong),
        "errors": int(sum(wrong)),
        "orders": {
            c.order: {
                "capture_auc": round(c.capture_auc, 4),
                "accuracy_auc": round(c.accuracy_auc, 4),
                "caught_at": {f"{share:.0%}": round(c.at(share), 4) for share in REPORTED_SHARES},
            }
            for c in curves
        },
        "random": {
            "capture_auc": round(baseline["capture_auc"], 4),
            "caught_at": {f"{s:.0%}": round(v, 4) for s, v in baseline["at"].items()},
            "band_5_95": {
                f"{s:.0%}": [round(low, 4), round(high, 4)]
                for s, (low, high) in baseline["band_at"].items()
            },
            "seed": seed,
            "draws": RANDOM_DRAWS,
        },
    }


def curve_frame(
    curves: Sequence[Curve],
    wrong: Sequence[bool],
    *,
    seed: int = 0,
    baseline: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Long frame of the error-capture curves with the random mean and band (``baseline``, else
    :func:`random_baseline` of ``seed``), for a chart: ``order``, ``reviewed``, ``captured``,
    ``low``, ``high`` (the band, random rows only); at most :data:`CHART_POINTS` + 1 evenly
    spaced points per curve, both ends included."""
    baseline = baseline or random_baseline(wrong, seed=seed)
    shown = chart_positions(len(wrong))
    rows = [
        (c.order, c.reviewed[i], c.captured[i], math.nan, math.nan) for c in curves for i in shown
    ]
    random = [baseline[k] for k in ("reviewed", "captured_mean", "captured_low", "captured_high")]
    rows += [(RANDOM_SERIES, *values) for values in zip(*random, strict=True)]
    return pd.DataFrame(rows, columns=["order", "reviewed", "captured", "low", "high"])


def answers_of(
    table: pd.DataFrame, answers: Mapping[str, str | None], columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """The rows of a decision table with a known answer (their ``columns``, else all), with a
    ``wrong`` column."""
    answered = table["item_id"].map(lambda key: answers.get(key) is not None)
    known = table.loc[answered, list(columns)] if columns else table[answered]
    # An abstention (no winner) is an error.
    known["wrong"] = judge_wrong(known["winner"], [answers[key] for key in known["item_id"]])
    return known.reset_index(drop=True)


def judge_wrong(winners: Iterable[Any], answers: Sequence[Any]) -> list[bool]:
    """Whether each winner misses its answer; an abstention (None or NaN) is an error."""
    return [bool(pd.isna(w)) or w != a for w, a in zip(winners, answers, strict=True)]


def run_triage(
    run: Run,
    *,
    session: Session,
    orders: Sequence[str] = ("priority",),
    against: str = "gold",
    seed: int = 0,
) -> tuple[list[Curve], list[bool], pd.DataFrame]:
    """A stored run's review orders against gold or human labels: the curves (one per order),
    whether the judge is wrong per item, and the labelled items' decision table with ``wrong``.

    Raises:
        ValueError: an unknown order or ``against``, or no item has an answer to check against.
    """
    if against not in ("gold", "humans"):
        raise ValueError(f"against must be gold or humans, got {against!r}")
    table = analyse_run(run, session=session).table
    if against == "gold":
        answers = dict(zip(table["item_id"], table["gold"], strict=True))
    else:
        answers = dataset_gold(run.dataset_id, session=session).gold
    if all(value is None or pd.isna(value) for value in answers.values()):
        raise ValueError(f"run {run.name!r} has no item with {against} labels to check against")
    return table_triage(table, answers, orders=orders, seed=seed)


def table_triage(
    table: pd.DataFrame,
    answers: Mapping[str, Any],
    *,
    orders: Sequence[str] = ("priority",),
    seed: int = 0,
) -> tuple[list[Curve], list[bool], pd.DataFrame]:
    """:func:`run_triage` of a decision table against ``answers`` (None or NaN where unknown);
    ValueError when no item has an answer."""
    known = answers_of(table, {k: (None if pd.isna(v) else v) for k, v in answers.items()})
    if known.empty:
        raise ValueError("no item has an answer to check against")
    wrong = list(known["wrong"])
    curves = []
    for order in orders:
        if order == "random":
            ranking = np.random.default_rng(seed).permutation(len(known)).tolist()
            curves.append(curve(order, wrong, ranking))
        elif order == "calibrated":
            curves.append(doubt_curve(order, wrong, calibrated_scores(known, wrong, seed=seed)))
        else:
            curves.append(doubt_curve(order, wrong, item_scores(known, order)))
    return curves, wrong, known


def known_answers(table: pd.DataFrame, human: Mapping[str, str | None]) -> Mapping[str, str | None]:
    """What the judge is checked against: the gold ids where the dataset has them, else the
    human gold (:attr:`pcf.labelling.human_gold.HumanGold.gold`)."""
    return gold_answers(table) or dict(human)  # a large run's gold answers are not copied


def likely_errors_caught(p_wrong: pd.Series, labelled: set[str]) -> tuple[float, float]:
    """``(expected errors among the labelled items, expected errors among all items)`` from
    each item's probability that the judge is wrong."""
    return float(p_wrong[p_wrong.index.isin(list(labelled))].sum()), float(p_wrong.sum())
