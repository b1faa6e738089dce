"""Adaptive stopping: when an item's winner is settled before all its planned calls are made
(docs/costs.md, "Adaptive budgets", says what each policy promises, its priors and why).

After each wave (:func:`in_waves`) a policy decides from the calls so far and those still
planned, with Eq. 5 exactly as :mod:`pcf.consensus` does (per execution, averaged over the
executions with an ok judgment), under the weights it is given.

- ``certain`` stops only when no answers at all to the remaining planned calls (any scores, any
  ranking, any failure) could change the winner, so its winner is the full run's by construction.
  Each call adds ``x_c = ws*f_c/10 + wB*(n - rank_c)/(n - 1) + wv*[top = c] + wu*(1 - risk_c)``
  to candidate c's per-execution mean, and ``x_w - x_c`` lies in ``[-W, W]`` (W = the sum of the
  weights). For the leader w and each rival c, the worst case of the final ``C_w - C_c`` puts
  ``-W`` in every remaining call of every execution (a mean that only falls as calls are added),
  and counts an execution with no ok call yet at ``-W`` too; w is certain when that worst case
  still exceeds the tie tolerance for every rival.
- ``confident`` stops when a seeded Monte Carlo of a score model fitted to the item's ok calls
  (:class:`ScoreModel`, a conjugate Bayesian linear model) estimates the chance that the remaining
  calls change the winner at most at the threshold :func:`calibrate` chose (none passed: the other
  items stop by ``certain``). A call of execution e reads candidate c's factuality as
  ``a[e, c] + b[slot] + (a shift shared by the whole call) + N(0, sigma^2)``; each draw completes
  the item (failures, scores clipped to 0-10, rankings by the scores plus Gumbel noise of
  :data:`RANK_NOISE`, risks from the calls so far) and Eq. 5 names the full run's winner.

A finished adaptive run records :data:`STOPPING_VERSION` with its stops, so that a rerun by a
later release keeps them instead of asking a policy that may now decide otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from pcf.choices import POLICIES
from pcf.consensus import TIE_TOLERANCE, consensus, pack
from pcf.guarantees import fixed_sequence, random_sample, rest_upper_bound, smallest_sample
from pcf.judgments import Judgment
from pcf.orderings import seeded_rng
from pcf.weights import DEFAULT_WEIGHTS, Weights

STOPPING_VERSION = 4
"""The version of the policies' decisions: raise it with every change that can stop an item
elsewhere on the same calls. Version 1 is every release before versions were recorded."""
MIN_SIMULATIONS = 2_000
MAX_SIMULATIONS = 20_000
BATCH = 1_000
CHUNK = 64
"""Calls still to come drawn together in one array operation."""
PRIOR_SD = 1.0
"""The score model's prior guess of how far a judge's score of one answer wobbles between
orderings (points on the 0-10 scale)."""
PRIOR_DOF = 4.0
"""How many residual degrees of freedom that guess is worth (one call of five candidates)."""
SLOT_PRIOR = 1.0
"""The prior spread of each slot's effect on a score, in units of the noise: position bias
about as large as the wobble, until the calls say otherwise."""
FAILURE_PRIOR = 0.5
"""The Beta prior's count on each side of the chance that a remaining call fails (Jeffreys)."""
RANK_NOISE = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, math.inf)
"""How far a judge's ranking may stray from its own scores: a call ranks by its scores plus
Gumbel noise of this scale (points; 0 ranks by the scores, infinity at random), one of these
values per item."""
RANK_NOISE_PRIOR = 0.5
"""The prior chance that the ranking follows the scores (noise 0); the rest is shared evenly."""
MARGIN_EPSILON = 1e-12
"""Room for floating-point rounding on top of the tie tolerance in the ``certain`` bound."""
CALIBRATION_SHARE = 0.2
"""The share of a ``confident`` run's items judged in full to calibrate its threshold on (at
least :func:`pcf.guarantees.smallest_sample` items)."""
CALIBRATION_PURPOSE = "confident"
"""Seeds the calibration draw beside the run's seed, so that no other guarantee draws the same."""
DELTA = 0.1
"""The accepted chance that the calibrated threshold breaks its risk (1 - delta: confidence)."""
RISK_LEVELS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
"""The thresholds on the score model's estimated chance of a change that calibration tests,
safest first."""


class _Slotted(Protocol):
    @property
    def execution(self) -> int: ...
    @property
    def call_index(self) -> int: ...


CallT = TypeVar("CallT", bound=_Slotted)


def in_waves(calls: Sequence[CallT]) -> list[CallT]:
    """An item's calls in the order an adaptive run makes them: one call of each execution in
    turn, execution e from its e-th ordering on, wrapping around (so execution 0 opens with the
    canonical call, and the first call of each execution shows another order)."""
    turns = []
    ordered = sorted(calls, key=lambda call: (call.execution, call.call_index))
    for execution, group in itertools.groupby(ordered, key=lambda call: call.execution):
        own = list(group)
        start = execution % len(own)
        turns += [(turn, execution, call) for turn, call in enumerate(own[start:] + own[:start])]
    return [call for *_, call in sorted(turns, key=lambda t: t[:2])]


@dataclass(frozen=True)
class ItemCalls:
    """One item's calls so far (ok or failed), its candidates in listing order (it breaks exact
    ties), and the calls still to come in wave order (each one's execution and order)."""

    item_id: str
    candidate_ids: tuple[str, ...]
    judgments: tuple[Judgment, ...]
    remaining: tuple[tuple[int, tuple[str, ...]], ...] = ()

    @classmethod
    def of(
        cls,
        item_id: str,
        candidate_ids: tuple[str, ...],
        made: Sequence[Judgment],
        remaining: Sequence[tuple[int, tuple[str, ...]]] = (),
    ) -> ItemCalls:
        """The state every stopping decision reads, live or replayed: the calls ``made`` by
        execution and call index (as the store returns them), whatever order they came in."""
        judgments = sorted(made, key=lambda j: (j.execution, j.call_index))
        return cls(item_id, candidate_ids, tuple(judgments), tuple(remaining))

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


def contributions(
    judgments: Sequence[Judgment], candidate_ids: Sequence[str], weights: Weights
) -> np.ndarray:
    """What each ok call adds to each candidate's Eq. 5 sum (``x_c`` above): (calls, n), the
    candidates in listing order."""
    scores = [[j.factuality[c] for c in candidate_ids] for j in judgments]
    ranks = [[j.ranking.index(c) + 1 for c in candidate_ids] for j in judgments]
    risks = [[j.hallucination_risk[c] for c in candidate_ids] for j in judgments]
    shape = (len(judgments), len(candidate_ids))
    return call_terms(
        np.array(scores, dtype=float).reshape(shape),
        np.array(ranks).reshape(shape),
        np.array(risks, dtype=float).reshape(shape),
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
    executions = sorted({j.execution for j in calls.judgments} | set(calls.left()))
    ok = [j for j in calls.judgments if j.ok]
    terms = contributions(ok, calls.candidate_ids, weights)
    of = np.array([j.execution for j in ok])
    return {e: (int((of == e).sum()), terms[of == e].sum(axis=0)) for e in executions}


def is_certain(calls: ItemCalls, weights: Weights = DEFAULT_WEIGHTS) -> bool:
    """Whether no answers to the remaining calls could change the winner (see the module). A
    leader whose worst case beats every rival by more than the tie tolerance leads by that now
    too, so the tie rule cannot name another winner."""
    remaining = calls.left()
    if not remaining:
        return True
    sums = _sums(calls, weights)
    means = [total / count for count, total in sums.values() if count]
    if not means:
        return False  # every remaining call may fail: no winner, or any winner
    winner = int(np.argmax(np.mean(means, axis=0)))
    full = sum(weights.as_tuple())
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
    """The estimated chance that the remaining calls change the winner (the score model above),
    1 while an execution with calls to come has no ok call; seeded by the item and its calls.
    With a ``threshold``, drawing stops once the changes seen exceed it."""
    return change_probabilities(calls, weights, {simulations: threshold})[simulations]


def change_probabilities(
    calls: ItemCalls, weights: Weights, thresholds: dict[int, float | None]
) -> dict[int, float]:
    """:func:`change_probability` for each number of draws in ``thresholds`` (with its
    threshold), the same figures from fewer draws: estimates whose draws come in the same
    batches share one seeded stream, the smaller reading the first draws of the larger."""
    if not calls.remaining:
        return dict.fromkeys(thresholds, 0.0)
    answered = {j.execution for j in calls.judgments if j.ok}
    if not set(calls.left()) <= answered:  # without an ok call, there is no winner either
        return dict.fromkeys(thresholds, 1.0)
    winner = current_winner(calls, weights)
    model = ScoreModel.fit(calls, weights)
    # Whole batches but for the last: a count of draws that is not a whole number of batches
    # ends its stream.
    whole = {d: t for d, t in thresholds.items() if d % BATCH == 0}
    streams = [whole] if whole else []
    streams += [{d: t} for d, t in thresholds.items() if d % BATCH]
    out: dict[int, float] = {}
    for stream in streams:
        rng = seeded_rng("confident", calls.item_id, len(calls.judgments), len(calls.remaining))
        changes = drawn = 0
        while stream.keys() - out.keys():
            batch = min(BATCH, *(d - drawn for d in stream.keys() - out.keys()))
            changes += int(model.changed(winner, rng, batch).sum())
            drawn += batch
            for draws in stream.keys() - out.keys():
                threshold = stream[draws]
                if drawn == draws or (threshold is not None and changes > threshold * draws):
                    out[draws] = changes / drawn
    return out


@functools.cache
def slot_basis(n: int) -> np.ndarray:
    """An orthonormal basis (n, n - 1) of the slot effects that sum to zero, each slot's effect
    with the same variance."""
    spanning = np.column_stack([np.ones(n), np.eye(n)[:, : n - 1]])
    basis = np.linalg.qr(spanning)[0][:, 1:]
    basis.setflags(write=False)
    return basis


def slots(order: Sequence[str], candidate_ids: Sequence[str]) -> list[int]:
    """The slot each candidate (in listing order) is shown in by a call of ``order``."""
    return [order.index(cid) for cid in candidate_ids]


def slot_prior_precision(n: int) -> float:
    """The prior precision of the slot coordinates ``u``, in units of the noise, such that each
    slot's effect has prior spread :data:`SLOT_PRIOR` (its variance is ``(1 - 1/n)`` of u's)."""
    return (1 - 1 / n) / SLOT_PRIOR**2


def ranking_log_likelihoods(scores: np.ndarray, rankings: np.ndarray, noise: float) -> np.ndarray:
    """Per call (a row): the log chance that a call with ``scores`` (points per candidate) ranks
    its candidates as ``rankings`` (their indices, best first) when it ranks by its scores plus
    Gumbel noise of scale ``noise`` (Plackett-Luce with temperature ``noise``): at 0, 0 when the
    ranking follows the scores (equal scores in any order, each order as likely) and minus
    infinity otherwise; at infinity, every ranking alike."""
    n = scores.shape[1]
    if math.isinf(noise):
        return np.full(len(scores), -math.lgamma(n + 1))
    ordered = np.take_along_axis(scores, rankings, axis=1)
    if noise == 0:
        steps = np.diff(ordered, axis=1)
        out = np.where((steps > 0).any(axis=1), -math.inf, -0.0)  # -0.0: minus lgamma(2)s
        for row in np.flatnonzero(np.isfinite(out) & (steps == 0).any(axis=1)):  # equal scores
            out[row] = -sum(math.lgamma(c + 1) for c in Counter(ordered[row].tolist()).values())
        return out
    utility = ordered / noise
    tails = np.logaddexp.accumulate(utility[:, ::-1], axis=1)[:, ::-1]
    return np.sum(utility[:, :-1] - tails[:, :-1], axis=1)


def rank_noise_posterior(ok: Sequence[Judgment], candidate_ids: Sequence[str]) -> np.ndarray:
    """The posterior over :data:`RANK_NOISE` from ok calls' scores and rankings."""
    prior = np.full(len(RANK_NOISE), (1 - RANK_NOISE_PRIOR) / (len(RANK_NOISE) - 1))
    prior[0] = RANK_NOISE_PRIOR
    scores = np.array([[j.factuality[c] for c in candidate_ids] for j in ok], dtype=float)
    rankings = np.array([[candidate_ids.index(c) for c in j.ranking] for j in ok])
    by_noise = [ranking_log_likelihoods(scores, rankings, noise) for noise in RANK_NOISE]
    log_post = np.vstack([np.log(prior), np.column_stack(by_noise)]).sum(axis=0)  # call by call
    weights = np.exp(log_post - log_post.max())
    return weights / weights.sum()


@dataclass(frozen=True)
class ScoreModel:
    """The posterior of the score model (see the module) for one item's ok calls so far;
    executions numbered by their place in ``executions`` (those with an ok call).

    Attributes:
        rank_noise: the posterior chance of each :data:`RANK_NOISE` value.
        center: the posterior mean of the values ``a`` (n per execution), then the slot
            coordinates ``u`` (:func:`slot_basis`).
        spread: ``L`` of their posterior covariance over ``sigma^2`` (``L @ L.T``).
        residual, dof: the penalized residual sum of squares and its degrees of freedom.
        risks: the risks of each place's ok calls (E, n, most calls; zero-padded), and their
            number per place (E; floats).
        failures: calls so far that failed, and that were ok.
        counts, totals: per execution, its ok calls so far and their summed ``x`` (E, n).
        upcoming: per call to come, its execution place (U,) and candidates' slots (U, n).
    """

    rank_noise: np.ndarray
    executions: tuple[int, ...]
    center: np.ndarray
    spread: np.ndarray
    residual: float
    dof: int
    risks: tuple[np.ndarray, np.ndarray]
    failures: tuple[int, int]
    counts: np.ndarray
    totals: np.ndarray
    upcoming: tuple[np.ndarray, np.ndarray]
    weights: Weights

    @classmethod
    def fit(cls, calls: ItemCalls, weights: Weights) -> ScoreModel:
        """The posterior from the item's ok calls (at least one in every execution to come)."""
        ids = calls.candidate_ids
        n = len(ids)
        ok = sorted((j for j in calls.judgments if j.ok), key=lambda j: (j.execution, j.call_index))
        executions = tuple(sorted({j.execution for j in ok}))
        place = {e: i for i, e in enumerate(executions)}
        values = len(executions) * n
        shifted = [i for i, j in enumerate(ok) if any(o.execution == j.execution for o in ok[:i])]
        shift_column = {i: values + n - 1 + s for s, i in enumerate(shifted)}
        # Columns: a (n per execution), u (n - 1), a shift for every call but its execution's
        # first (whose level the values take); a row per call and candidate.
        design = np.zeros((len(ok) * n, values + n - 1 + len(shifted)))
        for i, j in enumerate(ok):
            rows = slice(i * n, (i + 1) * n)
            start = place[j.execution] * n
            design[rows, start : start + n] = np.eye(n)
            design[rows, values : values + n - 1] = slot_basis(n)[slots(j.order, ids)]
            if i in shift_column:
                design[rows, shift_column[i]] = 1.0
        scores = np.array([[j.factuality[c] for c in ids] for j in ok], dtype=float).ravel()
        penalty = np.zeros(design.shape[1])
        penalty[values : values + n - 1] = slot_prior_precision(n)
        precision = design.T @ design + np.diag(penalty)
        theta = np.linalg.solve(precision, design.T @ scores)
        errors = scores - design @ theta
        kept = values + n - 1
        covariance = np.linalg.inv(precision)[:kept, :kept]
        sums = _sums(calls, weights)
        return cls(
            rank_noise=rank_noise_posterior(ok, ids),
            executions=executions,
            center=theta[:kept],
            spread=np.linalg.cholesky(covariance),
            residual=float(errors @ errors + theta @ (penalty * theta)),
            dof=len(ok) * n - values - len(shifted),
            risks=_risks_by_place(ok, ids, place),
            failures=(sum(not j.ok for j in calls.judgments), len(ok)),
            counts=np.array([sums[e][0] for e in executions], dtype=float),
            totals=np.array([sums[e][1] for e in executions]),
            upcoming=(
                np.array([place[e] for e, _ in calls.remaining], dtype=int),
                np.array([slots(order, ids) for _, order in calls.remaining], dtype=int),
            ),
            weights=weights,
        )

    def changed(self, winner: int, rng: np.random.Generator, draws: int) -> np.ndarray:
        """For ``draws`` completions of the calls still to come: whether ``winner`` is no longer
        the sole leader of the full run."""
        places, slots_of = self.upcoming
        executions, n = self.totals.shape
        scale = PRIOR_DOF * PRIOR_SD**2 + self.residual
        sd = np.sqrt(scale / rng.chisquare(PRIOR_DOF + self.dof, draws))[:, None, None]
        drawn = self.center + (rng.standard_normal((draws, len(self.center))) @ self.spread.T)
        drawn *= sd[:, :, 0]
        values = drawn[:, : executions * n]  # a block of n per execution
        by_slot = np.einsum("du,su->ds", drawn[:, executions * n :], slot_basis(n))
        failed, ok = self.failures
        failing = rng.beta(FAILURE_PRIOR + failed, FAILURE_PRIOR + ok, draws)[:, None]
        noise = rng.choice(np.array(RANK_NOISE), size=draws, p=self.rank_noise)
        totals = np.broadcast_to(self.totals, (draws, executions, n)).copy()
        counts = np.broadcast_to(self.counts, (draws, executions)).copy()
        for start in range(0, len(places), CHUNK):
            chunk = slice(start, start + CHUNK)
            place, calls = places[chunk], len(places[chunk])
            # In place where it can be: fewer large arrays to make.
            score = np.take(values, place[:, None] * n + np.arange(n), axis=1)
            score += np.take(by_slot, slots_of[chunk], axis=1)
            scratch = rng.standard_normal((draws, calls, n))  # the scores' noise, then reused
            scratch *= sd
            score += scratch
            np.clip(score, 0.0, 10.0, out=score)
            ranked_by = _ranking_keys(score, noise, rng, scratch)
            risk = self._risk_draws(rng, place, scratch)
            answered = rng.random((draws, calls)) >= failing
            terms = call_terms(score, ranks(ranked_by), risk, self.weights)
            terms[~answered] = 0.0
            sums = np.zeros((executions, draws, n))  # each execution's calls added in turn
            for call, execution in enumerate(place):
                sums[execution] += terms[:, call]
            totals += sums.transpose(1, 0, 2)
            counts += answered.astype(float) @ np.eye(executions)[place]
        final = (totals / counts[..., None]).mean(axis=1)
        leaders = final >= final.max(axis=1, keepdims=True) - TIE_TOLERANCE
        return ~leaders[:, winner] | (leaders.sum(axis=1) > 1)

    def _risk_draws(
        self, rng: np.random.Generator, place: np.ndarray, scratch: np.ndarray
    ) -> np.ndarray:
        """For each draw, call to come (of the execution at ``place``) and candidate, the risk
        of one ok call of that execution, uniformly: (draws, calls, n), drawn into ``scratch``
        (of that shape) first."""
        risks, counts = self.risks
        n, most = risks.shape[1:]
        pick = rng.random(out=scratch)
        pick *= counts[place][:, None]
        at = pick.astype(np.intp)
        at += (place[:, None] * n + np.arange(n)) * most
        return np.take(risks, at)


def _ranking_keys(
    score: np.ndarray, noise: np.ndarray, rng: np.random.Generator, scratch: np.ndarray
) -> np.ndarray:
    """What the calls of each draw rank their candidates by (draws, calls, n): their scores
    plus Gumbel noise of the draw's scale in ``noise`` (at infinity the Gumbel noise alone),
    plus a billionth of a uniform draw (equal scores: a random order). ``scratch``, of that
    shape, takes the uniform draws."""
    keys = score.copy()
    noisy = noise > 0
    gumbel = gumbel_rows(rng, noisy, scratch)
    at_random = np.isinf(noise[noisy])[:, None, None]
    scale = np.where(at_random, 0.0, noise[noisy][:, None, None])
    keys[noisy] = np.where(at_random, gumbel, score[noisy] + scale * gumbel)
    jitter = rng.random(out=scratch)
    jitter *= 1e-9
    keys += jitter
    return keys


def _risks_by_place(
    ok: Sequence[Judgment], candidate_ids: Sequence[str], place: dict[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """:attr:`ScoreModel.risks` of the ok calls, their executions at ``place``."""
    by_place: list[list[list[float]]] = [[] for _ in place]
    for j in ok:
        by_place[place[j.execution]].append([j.hallucination_risk[c] for c in candidate_ids])
    counts = np.array([len(rows) for rows in by_place], dtype=float)
    table = np.zeros((len(by_place), len(candidate_ids), int(counts.max())))
    for p, rows in enumerate(by_place):
        table[p, :, : len(rows)] = np.transpose(rows)
    return table, counts


def gumbel_rows(rng: np.random.Generator, rows: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """``rng.gumbel(size=scratch.shape)[rows]`` (``rows`` a mask of the first axis), ``rng`` left
    where that call leaves it: the same values, bit for bit, at a uniform draw (into ``scratch``,
    whose values are lost) for each value of the other rows instead of two logarithms.

    Raises:
        TypeError: ``rng`` is not PCG64 (:func:`pcf.orderings.seeded_rng`'s), whose every value
            takes one step that ``advance`` can skip.
    """
    bits = rng.bit_generator
    if not isinstance(bits, np.random.PCG64):
        raise TypeError(f"gumbel_rows needs a PCG64 generator, not {type(bits).__name__}")
    start = bits.state
    shape = scratch.shape
    row_steps = math.prod(shape[1:])
    # The draws rng.gumbel would take, one a value; but after a 0 it takes another.
    if not rng.random(out=scratch).all():
        bits.state = start
        return rng.gumbel(size=shape)[rows]
    end = bits.state
    edges = np.flatnonzero(np.diff(rows.astype(np.int8), prepend=0, append=0)).tolist()
    bits.state = start
    runs = []
    done = 0
    for first, stop in zip(edges[::2], edges[1::2], strict=True):  # each run of rows
        bits.advance((first - done) * row_steps)
        runs.append(rng.gumbel(size=(stop - first, *shape[1:])))
        done = stop
    bits.state = end
    return np.concatenate(runs) if runs else np.empty((0, *shape[1:]))


def ranks(values: np.ndarray) -> np.ndarray:
    """Each candidate's rank (1 = the largest value) on the last axis, in the order
    ``np.argsort(-values)`` puts them: found by comparing each pair of candidates, a whole array
    at a time, except in the rows with equal values, which argsort orders (its own way)."""
    by_candidate = np.moveaxis(values, -1, 0).copy()
    rank = np.ones(by_candidate.shape, dtype=np.int16)  # small: quick to turn into floats
    tied = np.zeros(by_candidate.shape[1:], dtype=bool)
    for j in range(len(by_candidate)):
        for k in range(j + 1, len(by_candidate)):
            ahead = by_candidate[j] >= by_candidate[k]
            rank[k] += ahead
            rank[j] += ~ahead
            tied |= by_candidate[j] == by_candidate[k]
    rank = np.ascontiguousarray(np.moveaxis(rank, 0, -1))
    if tied.any():
        order = np.argsort(-values[tied], axis=-1)
        in_order = np.empty(order.shape, dtype=rank.dtype)
        np.put_along_axis(in_order, order, np.arange(1, len(by_candidate) + 1), axis=-1)
        rank[tied] = in_order
    return rank


@dataclass(frozen=True)
class StoppingPolicy:
    """When to stop an item's calls: ``certain`` or ``confident`` (see the module), at ``risk``
    (for ``confident``, the largest accepted chance of a change) under the Eq. 5 ``weights``."""

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
        return _all_settled([self], calls)[0]


@dataclass(frozen=True)
class Stop:
    """Where a policy stopped one item: after ``calls`` calls, for ``reason`` (certain,
    confident, planned_calls_made, max_calls or calibration), with ``winner`` (a listing index,
    -1 for none)."""

    calls: int
    reason: str
    winner: int


def replay_all(
    policies: Sequence[StoppingPolicy],
    item_id: str,
    candidate_ids: tuple[str, ...],
    planned: Sequence[Judgment],
) -> list[Stop]:
    """Where each of ``policies`` stops an item whose planned calls answer as ``planned`` did,
    taken in :func:`in_waves` order as an adaptive run makes them (no judge is called), with
    the Monte Carlo draws shared (:func:`_all_settled`)."""
    ordered = in_waves(planned)
    stops: dict[int, Stop] = {}
    for made in range(1, len(ordered) + 1):
        upcoming = [(j.execution, j.order) for j in ordered[made:]]
        calls = ItemCalls.of(item_id, candidate_ids, ordered[:made], upcoming)
        going = [i for i in range(len(policies)) if i not in stops]
        last = made == len(ordered)
        settled = [True] * len(going) if last else _all_settled([policies[i] for i in going], calls)
        winner = functools.cache(functools.partial(current_winner, calls))  # once per weights
        for i in itertools.compress(going, settled):
            reason = "planned_calls_made" if last else policies[i].name
            stops[i] = Stop(made, reason, winner(policies[i].weights))
    return [stops.get(i, Stop(0, "planned_calls_made", -1)) for i in range(len(policies))]


def _all_settled(policies: Sequence[StoppingPolicy], calls: ItemCalls) -> list[bool]:
    """:meth:`StoppingPolicy.settled` of each policy, one estimate for the ``confident`` ones
    on the same weights and number of draws: the draws are the same (seeded by the calls), and
    the estimate stopped early at the largest of their risks decides every one of them (more
    changes than that risk's share of the draws is more than any smaller risk's). The estimates
    on the same weights share their draws (:func:`change_probabilities`)."""
    confident = sorted((p for p in policies if p.name == "confident"), key=lambda p: p.risk)
    largest: dict[Weights, dict[int, float | None]] = {}  # per weights and draws
    for p in confident:  # last: largest
        largest.setdefault(p.weights, {})[simulations_for(p.risk)] = p.risk
    estimates = {
        (weights, draws): estimate
        for weights, thresholds in largest.items()
        for draws, estimate in change_probabilities(calls, weights, thresholds).items()
    }
    return [
        estimates[p.weights, simulations_for(p.risk)] <= p.risk
        if p.name == "confident"
        else is_certain(calls, p.weights)
        for p in policies
    ]


def calibration_sample(keys: Sequence[str], risk: float, seed: int) -> set[str]:
    """The items a ``confident`` run at ``risk`` judges in full first: :data:`CALIBRATION_SHARE`
    of ``keys`` drawn at random, at least the fewest on which a threshold can pass for the other
    items (:func:`pcf.guarantees.smallest_sample` of this many), and every item when there are no
    more. The draw is seeded by the run's seed and this purpose: no other guarantee's draw."""
    size = max(math.ceil(CALIBRATION_SHARE * len(keys)), smallest_sample(risk, DELTA, len(keys)))
    return random_sample(keys, size, CALIBRATION_PURPOSE, seed)


@dataclass(frozen=True)
class Calibration:
    """The threshold a ``confident`` run at ``risk`` chose on its ``items`` calibration items, of
    ``population`` items in all: the largest of :data:`RISK_LEVELS` passed in turn (None when the
    first failed), the winners it ``changed`` there, and the upper ``bound`` (confidence 1 -
    :data:`DELTA`) of the share of the other items whose winner it changes."""

    risk: float
    items: int
    population: int
    threshold: float | None
    changed: int
    bound: float | None

    def policy(self, weights: Weights) -> StoppingPolicy:
        """How the other items stop: ``confident`` at the threshold, else ``certain``."""
        if self.threshold is None:
            return StoppingPolicy("certain", weights=weights)
        return StoppingPolicy("confident", risk=self.threshold, weights=weights)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready, with delta and the guarantee in words."""
        others = self.population - self.items
        guarantee = (
            f"with probability >= {1 - DELTA:g} over the calibration draw, at most {self.risk:g} "
            f"of this run's {others} other items stop on another winner than their full run's"
            if self.threshold is not None
            else "no threshold passed: the other items stop only when certain"
        )
        return dataclasses.asdict(self) | {"delta": DELTA, "guarantee": guarantee}


def calibrate(
    risk: float,
    weights: Weights,
    items: Sequence[tuple[str, tuple[str, ...], Sequence[Judgment]]],
    population: int,
) -> Calibration:
    """The threshold for ``confident`` at ``risk`` chosen on calibration items judged in full
    (key, candidates, calls), a random sample of the run's ``population`` items (docs/costs.md)."""
    return choose_threshold(risk, threshold_changes(weights, items), population)


def threshold_changes(
    weights: Weights, items: Sequence[tuple[str, tuple[str, ...], Sequence[Judgment]]]
) -> np.ndarray:
    """Whether ``confident`` at each of :data:`RISK_LEVELS` stops each item judged in full (key,
    candidates, calls) on another winner than its full run's (items x thresholds): each item's
    calls replayed through :func:`replay_all`, the stopping code a run's other items go through
    (the same waves, call order, settled test and winner)."""
    policies = [StoppingPolicy("confident", risk=t, weights=weights) for t in RISK_LEVELS]
    changed = np.zeros((len(items), len(RISK_LEVELS)), dtype=bool)
    for row, (key, ids, calls) in enumerate(items):
        full = current_winner(ItemCalls.of(key, ids, calls), weights)
        changed[row] = [stop.winner != full for stop in replay_all(policies, key, ids, calls)]
    return changed


def choose_threshold(risk: float, changed: np.ndarray, population: int) -> Calibration:
    """The threshold chosen from :func:`threshold_changes` of the calibration items, a random
    sample of ``population`` items: the least conservative of :data:`RISK_LEVELS` passed in turn
    by :func:`pcf.guarantees.fixed_sequence` on the change rate of the other items."""
    tests = ((int(c), len(changed)) for c in changed.sum(axis=0))
    passed = fixed_sequence(tests, risk, DELTA, population=population)
    if not passed:
        return Calibration(risk, len(changed), population, None, 0, None)
    errors = int(changed[:, passed - 1].sum())
    bound = rest_upper_bound(errors, len(changed), population, DELTA)
    return Calibration(risk, len(changed), population, RISK_LEVELS[passed - 1], errors, bound)
