"""Recorded judges of our own making, each written to break an assumption of the stopping
policies (:mod:`pcf.stopping`): the score model reads scores that wobble around a value per
candidate and slot, ranks that follow the scores, calls that answer, and executions that agree.

Every family answers an item's planned calls (its schedule's orders in every execution) with
judgments, seeded, so a "full run" is a list of judgments that adaptive stopping can be replayed
on, or a ``judgments.jsonl`` the replay judge answers from. These are test fixtures, not
evidence about any real judge.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pcf.choices import SCHEDULES
from pcf.judgments import Judgment
from pcf.orderings import schedule
from pcf.stopping import (
    RISK_LEVELS,
    Calibration,
    ItemCalls,
    StoppingPolicy,
    calibration_sample,
    choose_threshold,
    current_winner,
    replay_all,
)
from pcf.weights import PRESETS, Weights

FAMILIES = (
    "integer_ties",
    "rankings_against_scores",
    "slot_outliers",
    "failed_calls",
    "executions_disagree",
)
"""- ``integer_ties``: whole-point scores on a coarse scale, so exact ties are common, and a tie
  ranked by slot (the first shown wins it);
- ``rankings_against_scores``: scores from one set of values, rankings (and so votes) from
  another, unrelated and noisier;
- ``slot_outliers``: one call in five puts whatever sits in slot 1 at 10 points, ranked first
  and risk-free;
- ``failed_calls``: a third of the calls fail, and now and then a whole execution;
- ``executions_disagree``: every execution after the first gives the item's values to other
  candidates (another day, sampling seed or model version), so it prefers another answer."""
BREAKING = (
    "cauchy_noise",
    "garbage",
    "random_answers",
    "execution_shifts",
    "confident_when_wrong",
)
"""Judges audits broke uncalibrated ``confident`` on (25% of winners changed at R=0.05):
- ``cauchy_noise``: heavy-tailed (Cauchy) score noise, no variance to estimate;
- ``garbage``: one call in five answers random scores, ranked by them;
- ``random_answers``: one call in five answers at random: uniform scores, a random ranking
  unrelated to them, uniform risks (its stated risks pure noise) and confidence;
- ``execution_shifts``: each execution moves every candidate's value by its own normal shift of
  one point (another day or sampling seed), shared by all of its calls;
- ``confident_when_wrong``: risks and confidence turned against the truth: the better an answer
  scores, the riskier the judge calls it, and it is surest when its top pick is not the best."""
GUARANTEE_FAMILIES = (
    "cauchy_noise",
    "random_answers",
    "slot_outliers",
    "execution_shifts",
    "integer_ties",
    "confident_when_wrong",
)
"""The families calibrated ``confident`` is held to (tests/test_stopping.py and
``benchmarks/guarantees.py``): heavy tails, random answers on a share of calls, slot outliers,
execution shifts, ties, stated confidence against correctness."""
SLOT_BIAS = 0.6
"""Points the first slot gains over the last, falling linearly between them."""


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    """An item's values: some clear leads, some near ties (points 0-10)."""
    return rng.uniform(3.0, 9.0, n)


def _risk(rng: np.random.Generator, score: np.ndarray) -> np.ndarray:
    return np.clip(np.round(0.5 - (score - 5) / 10 + rng.normal(0, 0.1, len(score)), 2), 0, 1)


def _stated(
    family: str,
    rng: np.random.Generator,
    score: np.ndarray,
    at_random: bool,
    by: np.ndarray,
    values: np.ndarray,
) -> tuple[np.ndarray, float]:
    """A call's stated risks and confidence: risks that fall as its ``score`` rises and a
    confidence of 0.7; at random for a ``random_answers`` call; for ``confident_when_wrong``,
    risks that rise with the score and a confidence of 0.95 when its top pick (the largest of
    ``by``) is not the best of the execution's ``values``, else 0.3."""
    risk = _risk(rng, score)
    if at_random:
        return np.round(rng.uniform(0, 1, len(score)), 2), round(float(rng.uniform()), 2)
    if family == "confident_when_wrong":
        return 1 - risk, 0.95 if np.argmax(by) != np.argmax(values) else 0.3
    return risk, 0.7


def record(
    family: str,
    item_id: str,
    candidate_ids: Sequence[str],
    orders: Sequence[Sequence[str]],
    executions: int,
    seed: int,
) -> list[Judgment]:
    """The judge ``family``'s answers to every planned call of one item.

    Args:
        family: one of :data:`FAMILIES`.
        item_id: the item's key.
        candidate_ids: its candidates in listing order.
        orders: its schedule (one execution's orders, canonical first).
        executions: how many times the schedule is made.
        seed: seeds the item's values and every call's noise.
    """
    if family not in FAMILIES + BREAKING:
        raise ValueError(f"unknown family {family!r}")
    rng = np.random.default_rng(seed)
    n = len(candidate_ids)
    values = _values(rng, n)
    rank_values = _values(rng, n)
    slot_bias = np.linspace(SLOT_BIAS, 0, n) - SLOT_BIAS / 2
    lost = {e for e in range(executions) if family == "failed_calls" and rng.random() < 0.2}
    out = []
    for execution in range(executions):
        values_e = values
        if family == "executions_disagree" and execution > 0:
            values_e = rng.permutation(values) + rng.normal(0, 0.5, n)
        elif family == "execution_shifts":
            values_e = values + rng.normal(0, 1.0, n)
        for call_index, shown in enumerate(orders):
            order = tuple(shown)
            slots = np.array([order.index(c) for c in candidate_ids])
            failed = family == "failed_calls" and (execution in lost or rng.random() < 1 / 3)
            if failed:
                out.append(Judgment(item_id, execution, call_index, order, False, "no_json"))
                continue
            score = values_e + slot_bias[slots] + rng.normal(0, 1.0, n)
            if family == "cauchy_noise":
                score = values_e + slot_bias[slots] + rng.standard_cauchy(n)
            elif family == "garbage" and rng.random() < 0.2:
                score = rng.uniform(0, 10, n)
            by = score
            at_random = family == "random_answers" and rng.random() < 0.2
            if at_random:
                score, by = rng.uniform(0, 10, n), rng.uniform(0, 10, n)
            if family == "integer_ties":
                score = 2 * np.round(score / 2)
                by = score - 1e-3 * slots  # a tie goes to the one shown first
            elif family == "rankings_against_scores":
                by = rank_values + rng.normal(0, 2.0, n)
            outlier = family == "slot_outliers" and rng.random() < 0.2
            score = np.clip(np.round(score, 1), 0, 10)
            risk, confidence = _stated(family, rng, score, at_random, by, values_e)
            if outlier:
                first = slots == 0
                score[first], risk[first] = 10.0, 0.0
                by = np.where(first, np.inf, by)
            ranking = tuple(candidate_ids[c] for c in np.argsort(-by, kind="stable"))
            out.append(
                Judgment(
                    item_id,
                    execution,
                    call_index,
                    order,
                    True,
                    None,
                    dict(zip(candidate_ids, map(float, score), strict=True)),
                    dict(zip(candidate_ids, map(float, risk), strict=True)),
                    ranking,
                    confidence,
                )
            )
    return out


def recorded_item(
    family: str,
    number: int,
    *,
    exhaustive_up_to: int = 4,
    most_candidates: int = 6,
    most_executions: int = 3,
) -> tuple[tuple[str, ...], list[Judgment], Weights]:
    """Item ``number`` of a family's seeded cases: 2 to ``most_candidates`` candidates, any
    schedule (exhaustive up to ``exhaustive_up_to`` candidates), K of 3, 5 or 7, 1 to
    ``most_executions`` executions (at least 2 for ``executions_disagree`` and
    ``execution_shifts``) and any preset; returns its candidates, its full run's calls and the
    weights to decide it with."""
    draw = random.Random(f"{family}-{number}")
    n = draw.randint(2, most_candidates)
    kind = draw.choice(SCHEDULES)
    if kind == "exhaustive" and n > exhaustive_up_to:
        kind = "balanced"
    k = draw.choice([3, 5, 7])
    if kind == "random":
        k = min(k, math.factorial(n))
    shifting = family in ("executions_disagree", "execution_shifts")
    executions = draw.randint(2 if shifting else 1, max(most_executions, 2 if shifting else 1))
    weights = PRESETS[draw.choice(sorted(PRESETS))]
    ids = tuple("abcdef"[:n])
    key = f"{family}-{number}"
    orders = schedule(kind, ids, k, dataset_seed=0, item_id=key)
    return ids, record(family, key, ids, orders, executions, number), weights


@dataclass(frozen=True)
class Replayed:
    """A family's seeded items, each replayed once under every :data:`RISK_LEVELS` of
    ``confident`` and under ``certain`` (its fallback), on the proposed weights: per item, its
    ``key``, whether each stop's winner differs from the full run's (items x policies) and its
    calls (items x policies, then the full run's)."""

    keys: list[str]
    items: list[tuple[str, tuple[str, ...], list[Judgment]]]
    changed: np.ndarray
    calls: np.ndarray

    @classmethod
    def of(cls, family: str, cases: int, **options: int) -> Replayed:
        """Items 0 to ``cases`` - 1 of ``family`` (:func:`recorded_item` with ``options``)."""
        policies = [StoppingPolicy("confident", risk=t) for t in RISK_LEVELS]
        policies.append(StoppingPolicy("certain"))
        items, changed, calls = [], [], []
        for number in range(cases):
            ids, made, _ = recorded_item(family, number, **options)
            key = made[0].item_id
            full = current_winner(ItemCalls.of(key, ids, made))
            stops = replay_all(policies, key, ids, made)
            items.append((key, ids, made))
            changed.append([stop.winner != full for stop in stops])
            calls.append([stop.calls for stop in stops] + [len(made)])
        return cls([key for key, *_ in items], items, np.array(changed), np.array(calls))

    def calibrated(self, risk: float, seed: int) -> CalibratedRun:
        """What a ``confident`` run at ``risk`` of seed ``seed`` does with these items: its
        calibration sample (:func:`calibration_sample`) judged in full, the threshold chosen
        there (:func:`choose_threshold`), the other items stopped by it (or by ``certain``)."""
        inside = np.isin(self.keys, list(calibration_sample(self.keys, risk, seed)))
        calibration = choose_threshold(risk, self.changed[inside, :-1], len(self.keys))
        chosen = calibration.threshold
        column = RISK_LEVELS.index(chosen) if chosen is not None else len(RISK_LEVELS)
        others = self.changed[~inside, column]
        calls = np.where(inside, self.calls[:, -1], self.calls[:, column])
        return CalibratedRun(
            calibration, int(others.sum()), len(others), float(calls.mean()), inside
        )


@dataclass(frozen=True)
class CalibratedRun:
    """One calibrated ``confident`` run replayed (:meth:`Replayed.calibrated`): its calibration,
    the winners ``changed`` among its ``others`` items, its calls per item and which items
    it judged in full (``inside``)."""

    calibration: Calibration
    changed: int
    others: int
    calls_per_item: float
    inside: np.ndarray

    @property
    def rate(self) -> float:
        """The realized change rate on the items outside the calibration sample."""
        return self.changed / self.others if self.others else 0.0
