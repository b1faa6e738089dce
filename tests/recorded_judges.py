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

import numpy as np

from pcf.choices import SCHEDULES
from pcf.judgments import Judgment
from pcf.orderings import schedule
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
BREAKING = ("cauchy_noise", "garbage")
"""Judges the issue's audit broke uncalibrated ``confident`` on (25% of winners changed at R=0.05):
- ``cauchy_noise``: heavy-tailed (Cauchy) score noise, no variance to estimate;
- ``garbage``: one call in five answers random scores, ranked by them."""
SLOT_BIAS = 0.6
"""Points the first slot gains over the last, falling linearly between them."""


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    """An item's values: some clear leads, some near ties (points 0-10)."""
    return rng.uniform(3.0, 9.0, n)


def _risk(rng: np.random.Generator, score: np.ndarray) -> np.ndarray:
    return np.clip(np.round(0.5 - (score - 5) / 10 + rng.normal(0, 0.1, len(score)), 2), 0, 1)


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
            if family == "integer_ties":
                score = 2 * np.round(score / 2)
                by = score - 1e-3 * slots  # a tie goes to the one shown first
            elif family == "rankings_against_scores":
                by = rank_values + rng.normal(0, 2.0, n)
            outlier = family == "slot_outliers" and rng.random() < 0.2
            score = np.clip(np.round(score, 1), 0, 10)
            risk = _risk(rng, score)
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
                    0.7,
                )
            )
    return out


def recorded_item(
    family: str, number: int, *, exhaustive_up_to: int = 4
) -> tuple[tuple[str, ...], list[Judgment], Weights]:
    """Item ``number`` of a family's seeded cases: 2 to 6 candidates, any schedule (exhaustive
    up to ``exhaustive_up_to`` candidates), K of 3, 5 or 7, 1 to 3 executions (2 to 3 for
    ``executions_disagree``) and any preset; returns its candidates, its full run's calls and
    the weights to decide it with."""
    draw = random.Random(f"{family}-{number}")
    n = draw.randint(2, 6)
    kind = draw.choice(SCHEDULES)
    if kind == "exhaustive" and n > exhaustive_up_to:
        kind = "balanced"
    k = draw.choice([3, 5, 7])
    if kind == "random":
        k = min(k, math.factorial(n))
    executions = draw.randint(2 if family == "executions_disagree" else 1, 3)
    weights = PRESETS[draw.choice(sorted(PRESETS))]
    ids = tuple("abcdef"[:n])
    key = f"{family}-{number}"
    orders = schedule(kind, ids, k, dataset_seed=0, item_id=key)
    return ids, record(family, key, ids, orders, executions, number), weights
