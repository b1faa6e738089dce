"""Order-instability metrics per item (METHOD.md), and dataset-level slot bias."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pcf.consensus import Consensus, JudgmentArrays
from pcf.flags import FLAGS, raise_flags, review_priority


@dataclass(frozen=True)
class Instability:
    """Per-item metrics and flags; NaN metrics where an item has no ok judgment."""

    top_agreement: np.ndarray
    top_entropy: np.ndarray
    kendall_w: np.ndarray
    margin: np.ndarray
    slot_following: np.ndarray
    n_ok: np.ndarray
    n_calls: np.ndarray
    flags: dict[str, np.ndarray]
    priority: np.ndarray

    def flag_names(self, row: int) -> list[str]:
        """The flags raised for one item, in :data:`FLAGS` order."""
        return [name for name in FLAGS if self.flags[name][row]]


def _flat(arrays: JudgmentArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(I, M, n) rank and slot, (I, M) ok and present, over all executions' calls."""
    items, n = len(arrays.item_ids), arrays.n
    return (
        arrays.rank.reshape(items, -1, n),
        arrays.slot.reshape(items, -1, n),
        arrays.ok.reshape(items, -1),
        arrays.present.reshape(items, -1),
    )


def top_slots(arrays: JudgmentArrays) -> tuple[np.ndarray, np.ndarray]:
    """For every call: the slot its top pick was shown in, and whether it is ok. (I, M) each."""
    rank, slot, ok, _ = _flat(arrays)
    top = (rank == 1).argmax(axis=2)
    return np.take_along_axis(slot, top[..., None], axis=2)[..., 0], ok


def instability(
    arrays: JudgmentArrays, consensus: Consensus, direct_winner: np.ndarray
) -> Instability:
    """METHOD.md's order-instability metrics and flags over all ok judgments of each item, from
    their consensus and the direct baseline's winner column (-1 for none)."""
    n = arrays.n
    rank, _, ok, present = _flat(arrays)
    n_ok = ok.sum(axis=1)
    has_ok = n_ok > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        tops = ((rank == 1) & ok[..., None]).sum(axis=1)  # (I, n) top-pick counts
        share = tops / n_ok[:, None]
        top_agreement = share.max(axis=1)
        # share * log(1 / share) is never -0.0, so a unanimous item's entropy prints as 0.0.
        surprise = np.log(1.0 / np.where(share > 0, share, 1.0))
        top_entropy = np.where(has_ok, (share * surprise).sum(axis=1) / np.log(n), np.nan)
        rank_sums = np.where(ok[..., None], rank, 0).sum(axis=1)
        m = n_ok.astype(float)
        spread = ((rank_sums - m[:, None] * (n + 1) / 2) ** 2).sum(axis=1)
        kendall_w = 12 * spread / (m**2 * (n**3 - n))
        slot_of_top, _ = top_slots(arrays)
        slot_counts = np.stack([((slot_of_top == s) & ok).sum(axis=1) for s in range(n)], axis=1)
        slot_following = slot_counts.max(axis=1) / n_ok
    score = consensus.score
    rows = np.arange(len(arrays.item_ids))
    winner = np.maximum(consensus.winner, 0)
    others = score.copy()
    others[rows, winner] = -np.inf
    margin = np.where(has_ok, score[rows, winner] - others.max(axis=1), np.nan)
    flags = raise_flags(
        has_ok=has_ok,
        top_agreement=top_agreement,
        overrides=consensus.winner != direct_winner,
        margin=margin,
        slot_following=slot_following,
        failed=(present & ~ok).any(axis=1),
    )
    priority = review_priority(
        np.nan_to_num(top_agreement), np.nan_to_num(kendall_w), flags, has_ok
    )
    metrics = (top_agreement, top_entropy, kendall_w, margin, slot_following)
    return Instability(*metrics, n_ok, present.sum(axis=1), flags, priority)


@dataclass(frozen=True)
class SlotBias:
    """Dataset-level position bias for items with ``n`` candidates."""

    n: int
    top_share: np.ndarray  # (n,) share of top picks shown in each slot
    top_counts: np.ndarray  # (n,)
    chi2: float
    p_value: float
    gold_recall: np.ndarray  # (n,) when gold sat in slot s, share of calls that picked it


@dataclass(frozen=True)
class SlotCounts:
    """The counts behind :class:`SlotBias` per slot (they add up over chunks of items with the
    same ``n``): ok calls whose top pick was shown there, that showed the gold answer there,
    and of those, that ranked it first."""

    n: int
    top_counts: np.ndarray
    gold_shown: np.ndarray
    gold_top: np.ndarray

    def __add__(self, other: SlotCounts) -> SlotCounts:
        counts = ("top_counts", "gold_shown", "gold_top")
        return replace(self, **{c: getattr(self, c) + getattr(other, c) for c in counts})

    def bias(self) -> SlotBias:
        """Shares, the chi-square test against uniform and the gold recall of these counts."""
        counts = self.top_counts
        total = counts.sum()
        chi2, p_value = _chi_square_uniform(counts) if total else (np.nan, np.nan)
        shown = self.gold_shown > 0
        recall = np.full(self.n, np.nan)
        recall[shown] = self.gold_top[shown] / self.gold_shown[shown]
        share = counts / total if total else counts.astype(float)
        return SlotBias(self.n, share, counts, float(chi2), float(p_value), recall)


def _chi_square_uniform(counts: np.ndarray) -> tuple[float, float]:
    """Pearson's chi-square of ``counts`` against uniform and its p-value: what
    ``scipy.stats.chisquare(counts)`` computes, step for step, from ``scipy.special`` alone
    (scipy.stats takes about 0.7 s more to load, in every pcf command that keeps results)."""
    from scipy.special import chdtrc  # noqa: PLC0415 - scipy loads slowly

    observed = np.asarray(counts, dtype=np.float64)
    expected = observed.mean(keepdims=True)
    statistic = ((observed - expected) ** 2 / expected).sum()
    return float(statistic), float(chdtrc(np.float64(observed.size - 1), statistic))


def slot_counts(arrays: JudgmentArrays, gold: list[str | None] | None = None) -> SlotCounts:
    """Top picks per slot, and where the gold answer was shown and picked (:class:`SlotCounts`)."""
    n = arrays.n
    slot_of_top, ok = top_slots(arrays)
    counts = np.bincount(slot_of_top[ok], minlength=n)
    gold_shown = gold_top = np.zeros(n, dtype=int)
    if gold is not None:
        rank, slot, ok_flat, _ = _flat(arrays)
        pairs = zip(arrays.candidate_ids, gold, strict=True)
        col = np.array([ids.index(g) if g in ids else -1 for ids, g in pairs])
        known = col >= 0
        c = np.maximum(col, 0)[:, None, None]
        gold_slot = np.take_along_axis(slot, c, axis=2)[..., 0]
        gold_is_top = np.take_along_axis(rank, c, axis=2)[..., 0] == 1
        usable = ok_flat & known[:, None]  # an ok call shows every candidate in a slot
        gold_shown = np.bincount(gold_slot[usable], minlength=n)
        gold_top = np.bincount(gold_slot[usable & gold_is_top], minlength=n)
    return SlotCounts(n, counts, gold_shown, gold_top)


def slot_bias(arrays: JudgmentArrays, gold: list[str | None] | None = None) -> SlotBias:
    """Share of top picks per slot with a chi-square test against uniform, and the gold
    answer's top-1 recall per slot (NaN where gold never sat in a slot or is unknown)."""
    return slot_counts(arrays, gold).bias()
