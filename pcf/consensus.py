"""Consensus over orderings (METHOD.md Eq. 5) and the other aggregation rules, on numpy arrays.

Judgments are packed into arrays shaped (items, executions, calls, candidates); every rule is a
handful of vectorised operations over them, so 100,000 items aggregate in well under a second.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from pcf.choices import RULES
from pcf.judgments import Judgment
from pcf.weights import DEFAULT_WEIGHTS, PRESETS, Weights

TIE_TOLERANCE = 1e-9
MAX_KEMENY_N = 6
ARRAYS = ("factuality", "risk", "rank", "slot", "ok", "present")
"""The per-call arrays of :class:`JudgmentArrays`, items first."""


# Borda only, mean score only and majority of top picks are Eq. 5 with one weight.
RULE_WEIGHTS = {
    "borda": PRESETS["rank-only"],
    "mean_score": PRESETS["score-only"],
    "majority": PRESETS["vote-only"],
}


@dataclass(frozen=True)
class JudgmentArrays:
    """The judgments of items that share a candidate count ``n``.

    Candidate axis = each item's listing order (``candidate_ids[i]``). Calls sit at their
    ``call_index``, executions at their index in ``executions``; missing calls are padding.

    Attributes:
        factuality: (I, E, K, n) factuality 0-10, NaN where the call is not ok.
        risk: (I, E, K, n) hallucination risk 0-1, NaN where not ok.
        rank: (I, E, K, n) rank 1..n (1 = best), 0 where not ok.
        slot: (I, E, K, n) 0-based slot each candidate was shown in, -1 where no call.
        ok: (I, E, K) the call parsed into a usable judgment.
        present: (I, E, K) a call was made (ok or failed).
    """

    item_ids: list[str]
    candidate_ids: list[tuple[str, ...]]
    executions: list[int]
    factuality: np.ndarray
    risk: np.ndarray
    rank: np.ndarray
    slot: np.ndarray
    ok: np.ndarray
    present: np.ndarray

    @property
    def n(self) -> int:
        """Candidates per item."""
        return self.rank.shape[-1]

    def prefix(self, k: int | None = None, executions: int | None = None) -> JudgmentArrays:
        """The first ``k`` calls of each execution, and each item's own first ``executions``
        executions (those in which it has a call), so what one item keeps never depends on the
        executions of other items; later executions are masked (no call there)."""
        prefix = self._taken((slice(None), slice(None), slice(None, k)))
        if executions is None:
            return prefix
        has_call = self.present.any(axis=2)
        kept = (has_call & (np.cumsum(has_call, axis=1) <= executions))[..., None]
        return replace(prefix, ok=prefix.ok & kept, present=prefix.present & kept)

    def execution(self, number: int) -> JudgmentArrays:
        """The calls of execution ``number`` alone (none when no item has that execution)."""
        e = [x for x, label in enumerate(self.executions) if label == number]
        return replace(self._taken((slice(None), e)), executions=[number] if e else [])

    def _taken(self, index: tuple) -> JudgmentArrays:
        """Every array indexed by ``index``."""
        return replace(self, **{name: getattr(self, name)[index] for name in ARRAYS})


def pack(
    judgments: Iterable[Judgment], candidate_ids: Mapping[str, Sequence[str]] | None = None
) -> list[JudgmentArrays]:
    """Pack judgments into arrays, one :class:`JudgmentArrays` per candidate count, each item's
    candidates in listing order (``candidate_ids``, else the order of its first call)."""
    by_item: dict[str, list[Judgment]] = defaultdict(list)
    for j in judgments:
        by_item[j.item_id].append(j)
    groups: dict[int, list[str]] = defaultdict(list)
    listing: dict[str, tuple[str, ...]] = {}
    for item_id, calls in by_item.items():
        if candidate_ids and item_id in candidate_ids:
            ids = tuple(candidate_ids[item_id])
        else:
            ids = min(calls, key=lambda j: (j.execution, j.call_index)).order
        listing[item_id] = ids
        groups[len(ids)].append(item_id)
    return [_pack_group(ids, by_item, listing) for _, ids in sorted(groups.items())]


def listing_error(call: Judgment, ids: Sequence[str]) -> ValueError | None:
    """The error of a call whose order shows other candidates than its item lists, or None."""
    if set(call.order) == set(ids):
        return None
    return ValueError(
        f"item {call.item_id!r}: call {call.execution}/{call.call_index} orders "
        f"{list(call.order)}, but the item's candidates are {list(ids)}"
    )


def _pack_group(
    item_ids: list[str], by_item: dict[str, list[Judgment]], listing: dict[str, tuple[str, ...]]
) -> JudgmentArrays:
    n = len(listing[item_ids[0]])
    executions = sorted({j.execution for i in item_ids for j in by_item[i]})
    e_index = {e: x for x, e in enumerate(executions)}
    k = 1 + max(j.call_index for i in item_ids for j in by_item[i])
    shape = (len(item_ids), len(executions), k)
    factuality = np.full((*shape, n), np.nan)
    risk = np.full((*shape, n), np.nan)
    rank = np.zeros((*shape, n), dtype=np.int8)
    slot = np.full((*shape, n), -1, dtype=np.int8)
    ok = np.zeros(shape, dtype=bool)
    present = np.zeros(shape, dtype=bool)
    for i, item_id in enumerate(item_ids):
        ids = listing[item_id]
        for j in by_item[item_id]:
            if error := listing_error(j, ids):
                raise error
            at = (i, e_index[j.execution], j.call_index)
            present[at] = True
            slot[at] = [j.order.index(cid) for cid in ids]
            if not j.ok:
                continue
            ok[at] = True
            factuality[at] = [j.factuality[cid] for cid in ids]
            risk[at] = [j.hallucination_risk[cid] for cid in ids]
            rank[at] = [j.ranking.index(cid) + 1 for cid in ids]
    listed = [listing[i] for i in item_ids]
    return JudgmentArrays(item_ids, listed, executions, factuality, risk, rank, slot, ok, present)


@dataclass(frozen=True)
class Consensus:
    """Per-item consensus, averaged over executions; rows follow ``JudgmentArrays.item_ids``;
    ``winner`` is a candidate column index, -1 when the item has no ok judgment (abstention)."""

    score: np.ndarray  # (I, n) C_c
    mean_score: np.ndarray  # (I, n) S_c
    borda: np.ndarray  # (I, n) B_c
    vote: np.ndarray  # (I, n) V_c
    certainty: np.ndarray  # (I, n) U_c
    winner: np.ndarray  # (I,)

    def winner_ids(self, arrays: JudgmentArrays) -> list[str | None]:
        """Winners as candidate ids (None for an abstention)."""
        return [
            ids[w] if w >= 0 else None
            for ids, w in zip(arrays.candidate_ids, self.winner.tolist(), strict=True)
        ]


def components(arrays: JudgmentArrays) -> tuple[np.ndarray, ...]:
    """``(S, B, V, U, count)``: S..U per item, execution and candidate (I, E, n; NaN where an
    execution has no ok call), and the ok calls per execution (I, E)."""
    n = arrays.n
    ok = arrays.ok[..., None]
    count = arrays.ok.sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = count[..., None]
        s = np.where(ok, arrays.factuality, 0.0).sum(axis=2) / 10.0 / denom
        b = np.where(ok, (n - arrays.rank) / (n - 1), 0.0).sum(axis=2) / denom
        v = (ok & (arrays.rank == 1)).sum(axis=2) / denom
        u = np.where(ok, 1.0 - arrays.risk, 0.0).sum(axis=2) / denom
    return s, b, v, u, count


def _mean_over_executions(values: np.ndarray, has_ok: np.ndarray) -> np.ndarray:
    """Average (I, E, n) over the executions with an ok judgment; NaN-free zeros elsewhere."""
    total = np.where(has_ok[..., None], values, 0.0).sum(axis=1)
    return total / np.maximum(has_ok.sum(axis=1), 1)[:, None]


def pick_winner(*keys: np.ndarray, has_ok: np.ndarray) -> np.ndarray:
    """Argmax of the first key; values within 1e-9 tie and fall to the next key, then the
    candidate listed first. Returns -1 for rows without an ok judgment."""
    candidates = np.ones(keys[0].shape, dtype=bool)
    for key in keys:
        best = np.where(candidates, key, -np.inf).max(axis=1, keepdims=True)
        candidates &= key >= best - TIE_TOLERANCE
    return np.where(has_ok, candidates.argmax(axis=1), -1)


def consensus(arrays: JudgmentArrays, weights: Weights = DEFAULT_WEIGHTS) -> Consensus:
    """Eq. 5 per execution, averaged over executions that have an ok judgment; ties as
    :func:`pick_winner` breaks them (larger V, then B, then S, then listing order)."""
    s_e, b_e, v_e, u_e, count = components(arrays)
    has_ok_e = count > 0
    ws, wb, wv, wu = weights.as_tuple()
    c_e = ws * s_e + wb * b_e + wv * v_e + wu * u_e
    c, s, b, v, u = (_mean_over_executions(x, has_ok_e) for x in (c_e, s_e, b_e, v_e, u_e))
    return Consensus(c, s, b, v, u, pick_winner(c, v, b, s, has_ok=np.any(has_ok_e, axis=1)))


def consensus_ranking(result: Consensus) -> np.ndarray:
    """Every candidate by ``C``, best first, with the winner's tie rule at each place: (I, n)
    candidate columns, all -1 for an item without an ok judgment."""
    keys = (result.score, result.vote, result.borda, result.mean_score)
    has_ok = result.winner >= 0
    rows = np.arange(len(has_ok))
    left = np.ones(keys[0].shape, dtype=bool)
    out = np.full(keys[0].shape, -1, dtype=np.int64)
    for place in range(keys[0].shape[1]):
        best = pick_winner(*(np.where(left, key, -np.inf) for key in keys), has_ok=has_ok)
        out[:, place] = best
        left[rows, np.maximum(best, 0)] = False
    return out


def kemeny(arrays: JudgmentArrays) -> tuple[np.ndarray, bool]:
    """Kemeny rankings (fewest pairwise disagreements with all ok judgments): (I, n) candidate
    columns, best first (-1 rows without an ok judgment), and whether they are exact. Exact for
    n <= 6 (all n! rankings, ties to the first in lexicographic order); beyond, the local
    optimum of :func:`_kemeny_local_search`."""
    n = arrays.n
    rank = arrays.rank.reshape(len(arrays.item_ids), -1, n).astype(np.int64)
    ok = arrays.ok.reshape(len(arrays.item_ids), -1)
    # prefer[i, a, b] = number of ok judgments ranking a above b.
    above = (rank[:, :, :, None] < rank[:, :, None, :]) & ok[:, :, None, None]
    prefer = above.sum(axis=1)
    exact = n <= MAX_KEMENY_N
    if exact:
        perms = np.array(list(itertools.permutations(range(n))), dtype=np.int64)
        position = np.argsort(perms, axis=1)  # position[p, c] = place of candidate c
        before = position[:, :, None] < position[:, None, :]  # before[p, a, b]: a above b
        # Disagreements of ordering p: pairs it puts a above b, weighted by judgments preferring b.
        cost = np.einsum("pab,iba->ip", before.astype(np.int64), prefer)
        rankings = perms[cost.argmin(axis=1)]
    else:
        rankings = np.array([_kemeny_local_search(p) for p in prefer], dtype=np.int64)
        rankings = rankings.reshape(len(arrays.item_ids), n)
    return np.where(np.any(ok, axis=1)[:, None], rankings, -1), exact


def _disagreements(order: Sequence[int], prefer: np.ndarray) -> int:
    """Pairwise disagreements of a ranking with the judgments (``prefer[a, b]``: a above b)."""
    return sum(int(prefer[b, a]) for x, a in enumerate(order) for b in order[x + 1 :])


def _kemeny_local_search(prefer: np.ndarray) -> list[int]:
    """A Kemeny ranking by local search: from the candidates by pairwise wins (ties by listing
    order), move one candidate while that lowers the disagreements (best move first)."""
    n = len(prefer)
    order = sorted(range(n), key=lambda c: (-int(prefer[c].sum()), c))
    cost = _disagreements(order, prefer)
    while True:
        moves = []
        for c in order:
            rest = [x for x in order if x != c]
            moves += [[*rest[:to], c, *rest[to:]] for to in range(n)]
        best_cost, best = min(((_disagreements(m, prefer), m) for m in moves), key=lambda m: m[0])
        if best_cost >= cost:
            return order
        order, cost = best, best_cost


def apply_rule(
    arrays: JudgmentArrays, rule: str, weights: Weights
) -> tuple[Consensus, np.ndarray, str | None]:
    """One of :data:`RULES` (``eq5`` and Kemeny's consensus scores use ``weights``): its
    consensus (its winner), full ranking and, for Kemeny, how it was found."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; choose one of {', '.join(RULES)}")
    result = consensus(arrays, RULE_WEIGHTS.get(rule, weights))
    if rule != "kemeny":
        return result, consensus_ranking(result), None
    ranking, exact = kemeny(arrays)
    return replace(result, winner=ranking[:, 0]), ranking, "exact" if exact else "local"


def winners(
    arrays: JudgmentArrays, rule: str = "eq5", weights: Weights = DEFAULT_WEIGHTS
) -> np.ndarray:
    """Winner column per item under one of :data:`RULES` (``eq5`` uses ``weights``)."""
    return apply_rule(arrays, rule, weights)[0].winner
