"""Adaptive stopping: when an item's winner is settled before all its planned calls are made.

An item's calls are made in waves; after each wave a policy looks at the calls so far and at the
calls still planned, and says whether to stop. Both policies decide with Eq. 5 exactly as
:mod:`pcf.consensus` does (per execution, averaged over the executions with an ok judgment).

- ``certain`` stops only when no answers at all to the remaining planned calls (any scores, any
  ranking, any failure) could change the winner, so its winner is the full run's by construction.
  Each call adds ``x_c = ws*f_c/10 + wB*(n - rank_c)/(n - 1) + wv*[top = c] + wu*(1 - risk_c)``
  to candidate c's per-execution mean, and ``x_w - x_c`` lies in ``[-W, W]`` (W = the sum of the
  weights). For the leader w and each rival c, the worst case of the final ``C_w - C_c`` puts
  ``-W`` in every remaining call of every execution (a mean that only falls as calls are added),
  and counts an execution with no ok call yet at ``-W`` too; w is certain when that worst case
  still exceeds the tie tolerance for every rival.
- ``confident`` stops when the estimated chance that the remaining calls change the winner is at
  most ``risk``. The estimate is a seeded Monte Carlo of the Polya urn (the predictive rule of a
  Dirichlet process): each remaining call repeats one of the calls so far, picked uniformly, or
  with probability ``prior / (calls so far + prior)`` is a fresh, uninformative judgment
  (uniform scores and risks, a uniformly random ranking). It is Adaptive-Consistency's idea
  (Aggarwal et al., 2023: a Dirichlet posterior over answers, stop when the leader is safe)
  carried from majority votes over samples to Eq. 5 over orderings; the prior keeps two agreeing
  calls from looking certain, and the fresh judgments are what an order-sensitive judge could
  still say.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pcf.consensus import DEFAULT_WEIGHTS, TIE_TOLERANCE, Weights, consensus, pack
from pcf.judgments import Judgment
from pcf.orderings import seeded_rng

POLICIES = ("off", "certain", "confident")
STOP_REASONS = ("certain", "confident", "planned_calls_made", "max_calls")
MIN_SIMULATIONS = 2_000
MAX_SIMULATIONS = 20_000
BATCH = 1_000
DEFAULT_PRIOR = 0.5
"""The urn's weight of a fresh call: on the simulated judge, R = 0.01 then keeps 99% of the
full run's winners (benchmarks/adaptive_budget.py)."""
MARGIN_EPSILON = 1e-12
"""Room for floating-point rounding on top of the tie tolerance in the ``certain`` bound."""


@dataclass(frozen=True)
class ItemCalls:
    """One item's calls so far and the calls still planned for it.

    Attributes:
        item_id: the item's key.
        candidate_ids: the item's candidates in listing order (it breaks exact ties).
        judgments: the calls made so far (ok or failed).
        remaining: per execution number, how many calls are still to come.
    """

    item_id: str
    candidate_ids: tuple[str, ...]
    judgments: tuple[Judgment, ...]
    remaining: Mapping[int, int]


def contributions(judgment: Judgment, candidate_ids: Sequence[str], weights: Weights) -> np.ndarray:
    """What one ok call adds to each candidate's Eq. 5 sum (``x_c`` above), in listing order."""
    n = len(candidate_ids)
    ws, wb, wv, wu = weights.as_tuple()
    top = judgment.ranking[0]
    return np.array(
        [
            ws * judgment.factuality[c] / 10
            + wb * (n - (judgment.ranking.index(c) + 1)) / (n - 1)
            + wv * (c == top)
            + wu * (1 - judgment.hallucination_risk[c])
            for c in candidate_ids
        ]
    )


def current_winner(calls: ItemCalls, weights: Weights = DEFAULT_WEIGHTS) -> int:
    """The consensus winner of the calls so far (a listing index), -1 without an ok call."""
    if not any(j.ok for j in calls.judgments):
        return -1
    (arrays,) = pack(calls.judgments, {calls.item_id: calls.candidate_ids})
    return int(consensus(arrays, weights).winner[0])


def _sums(calls: ItemCalls, weights: Weights) -> dict[int, tuple[int, np.ndarray]]:
    """Per execution that has a call so far or still to come: ok calls and their summed ``x``."""
    n = len(calls.candidate_ids)
    executions = {j.execution for j in calls.judgments} | set(calls.remaining)
    out = {e: (0, np.zeros(n)) for e in executions}
    for j in calls.judgments:
        if j.ok:
            count, total = out[j.execution]
            out[j.execution] = (count + 1, total + contributions(j, calls.candidate_ids, weights))
    return out


def is_certain(calls: ItemCalls, weights: Weights = DEFAULT_WEIGHTS) -> bool:
    """Whether no answers to the remaining calls could change the winner (see the module)."""
    remaining = {e: r for e, r in calls.remaining.items() if r > 0}
    winner = current_winner(calls, weights)
    if not remaining:
        return True
    if winner < 0:
        return False  # every remaining call may fail: no winner, or any winner
    full = sum(weights.as_tuple())
    sums = _sums(calls, weights)
    worst = []
    for execution, (count, total) in sums.items():
        left = remaining.get(execution, 0)
        if count:
            worst.append((total[winner] - total - left * full) / (count + left))
        elif left:
            worst.append(np.full(len(total), -full))
    margin = np.mean(worst, axis=0)
    margin[winner] = math.inf
    return bool((margin > TIE_TOLERANCE + MARGIN_EPSILON).all())


def simulations_for(risk: float) -> int:
    """Monte Carlo draws for a risk level: enough to see about 20 changes at that rate."""
    return int(min(MAX_SIMULATIONS, max(MIN_SIMULATIONS, math.ceil(20 / risk))))


def change_probability(
    calls: ItemCalls,
    weights: Weights = DEFAULT_WEIGHTS,
    *,
    prior: float = 1.0,
    simulations: int = MIN_SIMULATIONS,
    threshold: float | None = None,
) -> float:
    """The estimated chance that the remaining calls change the winner (the Polya urn above).

    Seeded by the item and its calls so far, so the same calls give the same estimate. Draws
    come in batches; with a ``threshold``, drawing stops once the estimate is sure to exceed
    it (the changes seen already are more than ``threshold`` of all the draws).
    """
    winner = current_winner(calls, weights)
    left = [(e, r) for e, r in sorted(calls.remaining.items()) if r > 0]
    if not left:
        return 0.0
    if winner < 0:
        return 1.0
    rng = seeded_rng("confident", calls.item_id, len(calls.judgments), sum(r for _, r in left))
    changes = drawn = 0
    while drawn < simulations:
        batch = min(BATCH, simulations - drawn)
        changes += int(_changed(calls, weights, prior, left, winner, rng, batch).sum())
        drawn += batch
        if threshold is not None and changes > threshold * simulations:
            break
    return changes / drawn


def _changed(
    calls: ItemCalls,
    weights: Weights,
    prior: float,
    left: list[tuple[int, int]],
    winner: int,
    rng: np.random.Generator,
    draws: int,
) -> np.ndarray:
    """For ``draws`` simulated completions: whether ``winner`` is no longer the sole leader."""
    n = len(calls.candidate_ids)
    sums = _sums(calls, weights)
    pool = [contributions(j, calls.candidate_ids, weights) for j in calls.judgments if j.ok]
    steps = sum(r for _, r in left)
    urn = np.empty((draws, len(pool) + steps, n))
    urn[:, : len(pool)] = np.array(pool)
    count = {e: float(c) for e, (c, _) in sums.items()}
    total = {e: np.tile(t, (draws, 1)) for e, (_, t) in sums.items()}
    rows = np.arange(draws)
    size = len(pool)
    for execution, r in left:
        for _ in range(r):
            fresh = rng.random(draws) < prior / (size + prior)
            picked = urn[rows, rng.integers(0, size, draws)]
            draw = np.where(fresh[:, None], _fresh_calls(rng, draws, n, weights), picked)
            urn[:, size] = draw
            size += 1
            count[execution] += 1
            total[execution] += draw
    final = np.mean([total[e] / count[e] for e in total if count[e] > 0], axis=0)
    leaders = final >= final.max(axis=1, keepdims=True) - TIE_TOLERANCE
    return ~leaders[:, winner] | (leaders.sum(axis=1) > 1)


def _fresh_calls(rng: np.random.Generator, draws: int, n: int, weights: Weights) -> np.ndarray:
    """``x`` of uninformative judgments: uniform scores and risks, a random ranking."""
    ws, wb, wv, wu = weights.as_tuple()
    rank = np.argsort(rng.random((draws, n)), axis=1) + 1
    return (
        ws * rng.random((draws, n))
        + wb * (n - rank) / (n - 1)
        + wv * (rank == 1)
        + wu * rng.random((draws, n))
    )


@dataclass(frozen=True)
class StoppingPolicy:
    """When to stop an item's calls.

    Attributes:
        name: ``certain`` or ``confident`` (see the module).
        risk: for ``confident``, the largest accepted chance that the winner still changes.
        prior: for ``confident``, the urn's weight of a fresh, uninformative call.
        weights: the Eq. 5 weights that decide.
    """

    name: str
    risk: float = 0.01
    prior: float = DEFAULT_PRIOR
    weights: Weights = DEFAULT_WEIGHTS

    def __post_init__(self) -> None:
        if self.name not in POLICIES[1:]:
            raise ValueError(f"unknown policy {self.name!r}; choose certain or confident")
        if not 0 < self.risk < 1:
            raise ValueError(f"risk must be between 0 and 1, got {self.risk}")

    def settled(self, calls: ItemCalls) -> bool:
        """Whether the item's winner is settled by the calls so far."""
        if self.name == "certain":
            return is_certain(calls, self.weights)
        probability = change_probability(
            calls,
            self.weights,
            prior=self.prior,
            simulations=simulations_for(self.risk),
            threshold=self.risk,
        )
        return probability <= self.risk


def wave_order(judgment: Judgment) -> tuple[int, int]:
    """The order in which an item's calls are made: execution by execution, each in its
    schedule order (the canonical call first)."""
    return (judgment.execution, judgment.call_index)


@dataclass(frozen=True)
class Stop:
    """Where a policy stopped one item: after ``calls`` calls, for ``reason``
    (:data:`STOP_REASONS`), with ``winner`` (a listing index, -1 for none)."""

    calls: int
    reason: str
    winner: int


def replay(
    policy: StoppingPolicy,
    item_id: str,
    candidate_ids: tuple[str, ...],
    planned: Sequence[Judgment],
) -> Stop:
    """Where ``policy`` stops an item whose planned calls answer as ``planned`` did.

    The calls are taken in :func:`wave_order`, one wave of one call at a time, exactly as an
    adaptive run makes them; no judge is called.
    """
    ordered = sorted(planned, key=wave_order)
    for made in range(1, len(ordered) + 1):
        calls = ItemCalls(item_id, candidate_ids, tuple(ordered[:made]), _left(ordered[made:]))
        if made == len(ordered) or policy.settled(calls):
            reason = policy.name if made < len(ordered) else "planned_calls_made"
            return Stop(made, reason, current_winner(calls, policy.weights))
    return Stop(0, "planned_calls_made", -1)


def _left(calls: Sequence[Judgment]) -> dict[int, int]:
    """Calls still to come per execution."""
    out: dict[int, int] = {}
    for j in calls:
        out[j.execution] = out.get(j.execution, 0) + 1
    return out
