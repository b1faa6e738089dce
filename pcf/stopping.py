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
  most ``risk``. The estimate is a seeded Monte Carlo of a score model fitted to the item's ok
  calls (Thurstone's comparative judgment): a call reads candidate c's factuality as
  ``a_c + b_slot + (a shift shared by the whole call) + N(0, sigma^2)``, where ``b_slot`` is the
  judge's position bias (slot effects summing to zero). The prior is flat on the ``a_c`` and the
  call shifts, ``b ~ N(0, (SLOT_PRIOR * sigma)^2)``, and scaled-inverse-chi-square on
  ``sigma^2`` (:data:`PRIOR_SD` points, worth :data:`PRIOR_DOF` degrees of freedom): a
  conjugate Bayesian linear model, so the posterior is exact. Each draw completes the item:
  every remaining call scores ``a + b`` (at the slots its own order gives each candidate)
  ``+ noise``, clipped to 0-10, ranks and votes by those scores, and takes each candidate's risk
  from one of its calls so far; Eq. 5 then names the full run's winner. It is
  Adaptive-Consistency's idea (Aggarwal et al., 2023: a posterior over the judge's answers, stop
  once the leader is safe) with the posterior on the scores Eq. 5 reads instead of on votes:
  score gaps tell a clear item from a near tie after a call or two, where agreeing votes cannot,
  and the slot effects credit a lead won from a favourable slot only as far as the orders still
  to come keep it. It assumes a judge's scores wobble around a value per candidate and slot and
  that its ranking follows them; ``pcf whatif`` on a full run of one's own judge shows whether
  that holds before trusting it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
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
PRIOR_SD = 1.0
"""The score model's prior guess of how far a judge's score of one answer wobbles between
orderings (points on the 0-10 scale)."""
PRIOR_DOF = 4.0
"""How many residual degrees of freedom that guess is worth (one call of five candidates)."""
SLOT_PRIOR = 1.0
"""The prior spread of a slot's effect on a score, in units of the noise: position bias about
as large as the wobble, until the calls say otherwise."""
MARGIN_EPSILON = 1e-12
"""Room for floating-point rounding on top of the tie tolerance in the ``certain`` bound."""


@dataclass(frozen=True)
class ItemCalls:
    """One item's calls so far and the calls still planned for it.

    Attributes:
        item_id: the item's key.
        candidate_ids: the item's candidates in listing order (it breaks exact ties).
        judgments: the calls made so far (ok or failed).
        remaining: the calls still to come, in wave order: each one's execution and order
            (candidate ids by slot).
    """

    item_id: str
    candidate_ids: tuple[str, ...]
    judgments: tuple[Judgment, ...]
    remaining: tuple[tuple[int, tuple[str, ...]], ...] = ()

    def left(self) -> dict[int, int]:
        """Calls still to come per execution."""
        return dict(Counter(execution for execution, _ in self.remaining))


def call_terms(
    score: np.ndarray, rank: np.ndarray, risk: np.ndarray, weights: Weights
) -> np.ndarray:
    """``x_c`` of calls from their scores (0-10), ranks (1 = best) and risks; candidates on the
    last axis."""
    n = score.shape[-1]
    ws, wb, wv, wu = weights.as_tuple()
    return ws * score / 10 + wb * (n - rank) / (n - 1) + wv * (rank == 1) + wu * (1 - risk)


def contributions(judgment: Judgment, candidate_ids: Sequence[str], weights: Weights) -> np.ndarray:
    """What one ok call adds to each candidate's Eq. 5 sum (``x_c`` above), in listing order."""
    return call_terms(
        np.array([judgment.factuality[c] for c in candidate_ids], dtype=float),
        np.array([judgment.ranking.index(c) + 1 for c in candidate_ids]),
        np.array([judgment.hallucination_risk[c] for c in candidate_ids], dtype=float),
        weights,
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
    executions = {j.execution for j in calls.judgments} | set(calls.left())
    out = {e: (0, np.zeros(n)) for e in executions}
    for j in calls.judgments:
        if j.ok:
            count, total = out[j.execution]
            out[j.execution] = (count + 1, total + contributions(j, calls.candidate_ids, weights))
    return out


def is_certain(calls: ItemCalls, weights: Weights = DEFAULT_WEIGHTS) -> bool:
    """Whether no answers to the remaining calls could change the winner (see the module)."""
    remaining = calls.left()
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
    simulations: int = MIN_SIMULATIONS,
    threshold: float | None = None,
) -> float:
    """The estimated chance that the remaining calls change the winner (the score model above).

    Seeded by the item and its calls so far, so the same calls give the same estimate. Draws
    come in batches; with a ``threshold``, drawing stops once the estimate is sure to exceed
    it (the changes seen already are more than ``threshold`` of all the draws).
    """
    winner = current_winner(calls, weights)
    if not calls.remaining:
        return 0.0
    if winner < 0:
        return 1.0
    model = ScoreModel.fit(calls, weights)
    rng = seeded_rng("confident", calls.item_id, len(calls.judgments), len(calls.remaining))
    changes = drawn = 0
    while drawn < simulations:
        batch = min(BATCH, simulations - drawn)
        changes += int(model.changed(winner, rng, batch).sum())
        drawn += batch
        if threshold is not None and changes > threshold * simulations:
            break
    return changes / drawn


def slot_design(order: Sequence[str], candidate_ids: Sequence[str]) -> np.ndarray:
    """The slot effects' columns of one call, a row per candidate in listing order: ``b`` has
    n - 1 free values and the last slot takes minus their sum (the effects sum to zero)."""
    n = len(candidate_ids)
    rows = np.zeros((n, n - 1))
    for c, cid in enumerate(candidate_ids):
        slot = order.index(cid)
        if slot < n - 1:
            rows[c, slot] = 1.0
        else:
            rows[c] = -1.0
    return rows


@dataclass(frozen=True)
class ScoreModel:
    """The posterior of the score model (see the module) for one item's ok calls so far.

    Attributes:
        center: the posterior mean of the candidates' values ``a`` then the slot effects ``b``.
        spread: a square root of their posterior covariance over ``sigma^2`` (``L @ L.T``).
        residual: the penalized residual sum of squares.
        dof: its degrees of freedom (scores less the flat parameters).
        risks: the ok calls' hallucination risks, (m, n).
        sums: per execution with calls so far or to come: ok calls and their summed ``x``.
        upcoming: per call still to come, its execution and its slot columns (:func:`slot_design`).
        weights: the Eq. 5 weights.
    """

    center: np.ndarray
    spread: np.ndarray
    residual: float
    dof: int
    risks: np.ndarray
    sums: dict[int, tuple[int, np.ndarray]]
    upcoming: tuple[tuple[int, np.ndarray], ...]
    weights: Weights

    @classmethod
    def fit(cls, calls: ItemCalls, weights: Weights) -> ScoreModel:
        """The posterior from the item's ok calls (at least one)."""
        ids = calls.candidate_ids
        n = len(ids)
        ok = [j for j in calls.judgments if j.ok]
        m = len(ok)
        # Columns: a (n), b (n - 1), the shifts of calls 2..m (m - 1); a row per call and candidate.
        design = np.zeros((m * n, 2 * n - 1 + m - 1))
        for i, j in enumerate(ok):
            rows = slice(i * n, (i + 1) * n)
            design[rows, :n] = np.eye(n)
            design[rows, n : 2 * n - 1] = slot_design(j.order, ids)
            if i:
                design[rows, 2 * n - 2 + i] = 1.0
        scores = np.array([[j.factuality[c] for c in ids] for j in ok], dtype=float).ravel()
        penalty = np.zeros(design.shape[1])
        penalty[n : 2 * n - 1] = 1 / SLOT_PRIOR**2
        precision = design.T @ design + np.diag(penalty)
        theta = np.linalg.solve(precision, design.T @ scores)
        errors = scores - design @ theta
        covariance = np.linalg.inv(precision)[: 2 * n - 1, : 2 * n - 1]
        return cls(
            center=theta[: 2 * n - 1],
            spread=np.linalg.cholesky(covariance),
            residual=float(errors @ errors + theta @ (penalty * theta)),
            dof=m * n - (n + m - 1),
            risks=np.array([[j.hallucination_risk[c] for c in ids] for j in ok], dtype=float),
            sums=_sums(calls, weights),
            upcoming=tuple((e, slot_design(order, ids)) for e, order in calls.remaining),
            weights=weights,
        )

    def changed(self, winner: int, rng: np.random.Generator, draws: int) -> np.ndarray:
        """For ``draws`` completions of the calls still to come: whether ``winner`` is no longer
        the sole leader of the full run."""
        n = self.risks.shape[1]
        columns = np.arange(n)
        scale = PRIOR_DOF * PRIOR_SD**2 + self.residual
        sd = np.sqrt(scale / rng.chisquare(PRIOR_DOF + self.dof, draws))[:, None]
        drawn = self.center + (rng.standard_normal((draws, len(self.center))) @ self.spread.T) * sd
        value, slot_effect = drawn[:, :n], drawn[:, n:]
        count = {e: float(c) for e, (c, _) in self.sums.items()}
        total = {e: np.tile(t, (draws, 1)) for e, (_, t) in self.sums.items()}
        for execution, positions in self.upcoming:
            mean = value + slot_effect @ positions.T
            score = np.clip(mean + rng.standard_normal((draws, n)) * sd, 0.0, 10.0)
            shuffled = score + 1e-9 * rng.random((draws, n))  # equal scores: a random order
            rank = np.argsort(np.argsort(-shuffled, axis=1), axis=1) + 1
            risk = self.risks[rng.integers(0, len(self.risks), (draws, n)), columns]
            total[execution] += call_terms(score, rank, risk, self.weights)
            count[execution] += 1
        final = np.mean([total[e] / count[e] for e in total if count[e] > 0], axis=0)
        leaders = final >= final.max(axis=1, keepdims=True) - TIE_TOLERANCE
        return ~leaders[:, winner] | (leaders.sum(axis=1) > 1)


@dataclass(frozen=True)
class StoppingPolicy:
    """When to stop an item's calls.

    Attributes:
        name: ``certain`` or ``confident`` (see the module).
        risk: for ``confident``, the largest accepted chance that the winner still changes.
        weights: the Eq. 5 weights that decide.
    """

    name: str
    risk: float = 0.01
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
        upcoming = tuple((j.execution, j.order) for j in ordered[made:])
        calls = ItemCalls(item_id, candidate_ids, tuple(ordered[:made]), upcoming)
        if made == len(ordered) or policy.settled(calls):
            reason = policy.name if made < len(ordered) else "planned_calls_made"
            return Stop(made, reason, current_winner(calls, policy.weights))
    return Stop(0, "planned_calls_made", -1)
