"""Evaluation statistics of METHOD.md: accuracy, paired comparison against the direct baseline
(exact McNemar, paired bootstrap), and agreement corrected for the chance of one over an item's
candidates, which no naming of the candidates changes (Cohen's kappa or Krippendorff's alpha
over candidate ids as categories measured the naming: docs/choices.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

FEW_ITEMS = 20
"""An agreement or accuracy figure on fewer items than this is shown as too few to read, and
``pcf check`` fails it (its ``--min-items`` default): on 20 items one disagreement more or less
moves an agreement by 0.05 or more (docs/choices.md)."""


def on_items(n: int) -> str:
    """What a figure is measured on, to show beside it: ``n=42`` or ``n=2, too few (under 20)``."""
    return f"n={n}" if n >= FEW_ITEMS else f"n={n}, too few (under {FEW_ITEMS})"


def _check_aligned(first: Sequence, second: Sequence, names: str) -> None:
    if len(first) != len(second):
        raise ValueError(f"{names}: lengths differ ({len(first)} vs {len(second)})")
    if len(first) == 0:
        raise ValueError(f"{names}: nothing to evaluate")


def accuracy(winners: Sequence[str | None], gold: Sequence[str]) -> float:
    """The share (0-1) of items whose winner is the gold id; an abstention (None) is wrong."""
    _check_aligned(winners, gold, "winners and gold")
    return sum(w is not None and w == g for w, g in zip(winners, gold, strict=True)) / len(gold)


@dataclass(frozen=True)
class Agreement:
    """Agreement on ``n`` items: the ``share`` that agree with its exact (Clopper-Pearson)
    two-sided 95% interval ``low`` to ``high``, and ``kappa = (share - chance) / (1 - chance)``,
    ``chance`` the mean over the items of one over the item's candidates (a judge or a person who
    picks at random agrees that often); ``kappa`` None when chance is 1."""

    n: int
    share: float
    low: float
    high: float
    chance: float
    kappa: float | None


def chance_corrected(agree: Sequence[float], candidates: Sequence[int]) -> Agreement:
    """:class:`Agreement` of items that agree (1), do not (0) or agree in part (the share of
    pairs of people who agree on the item), with their candidate counts. The interval counts
    the agreeing items (rounded) among ``n``."""
    _check_aligned(agree, candidates, "agreement and candidate counts")
    n = len(agree)
    share = float(np.mean(agree))
    chance = float(np.mean([1 / c for c in candidates]))
    low, high = exact_interval(round(share * n), n)
    kappa = (share - chance) / (1 - chance) if chance < 1 else None
    return Agreement(n, share, low, high, chance, kappa)


def rater_agreement(choices: Sequence[Sequence[Hashable]], candidates: Sequence[int]) -> Agreement:
    """:func:`chance_corrected` agreement between people: per item (two choices or more), the
    share of pairs of its ``choices`` that are the same."""
    shares = []
    for given in choices:
        if len(given) < 2:
            raise ValueError("an item needs two choices or more to measure agreement")
        counts = np.array(list(Counter(given).values()))
        shares.append(float((counts * (counts - 1)).sum() / (len(given) * (len(given) - 1))))
    return chance_corrected(shares, candidates)


def exact_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a share seen as ``successes`` of
    ``n``."""
    from scipy.stats import beta  # noqa: PLC0415 - scipy.stats loads slowly

    tail = (1 - level) / 2
    low = float(beta.ppf(tail, successes, n - successes + 1)) if successes else 0.0
    high = float(beta.ppf(1 - tail, successes + 1, n - successes)) if successes < n else 1.0
    return low, high


def paired_outcomes(direct_correct: Sequence[bool], method_correct: Sequence[bool]) -> dict:
    """Item counts of a paired comparison against the direct baseline: ``improved`` (direct
    wrong, method right), ``regressed``, ``same`` (both right or both wrong), ``both_right``
    and ``both_wrong``."""
    _check_aligned(direct_correct, method_correct, "direct_correct and method_correct")
    pairs = Counter(zip(map(bool, direct_correct), map(bool, method_correct), strict=True))
    both_right, both_wrong = pairs[True, True], pairs[False, False]
    return {
        "improved": pairs[False, True],
        "regressed": pairs[True, False],
        "same": both_right + both_wrong,
        "both_right": both_right,
        "both_wrong": both_wrong,
    }


def mcnemar_exact(improved: int, regressed: int) -> float:
    """Exact (binomial) McNemar p-value, two-sided, on the discordant counts (1.0 without).

    As statsmodels' ``mcnemar(table, exact=True)``: twice the Binomial(n, 1/2) CDF at the smaller
    count k, at most 1, the CDF as the regularized incomplete beta function I_1/2(n - k, k + 1)
    (SciPy's binomial CDF to the last bit or two), without loading scipy.stats and statsmodels
    (0.5-0.9 s in every pcf command that keeps results)."""
    from scipy.special import betainc  # noqa: PLC0415 - scipy loads slowly

    if improved < 0 or regressed < 0:
        raise ValueError(f"counts must be non-negative, got {improved} and {regressed}")
    smaller, total = min(improved, regressed), improved + regressed
    if smaller >= total:  # no discordant pair
        return 1.0
    return min(float(betainc(float(total - smaller), smaller + 1.0, 0.5)) * 2, 1.0)


def paired_bootstrap_ci(
    direct_correct: Sequence[bool],
    method_correct: Sequence[bool],
    *,
    n_boot: int = 10000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI ``(low, high)`` of ``accuracy(method) - accuracy(direct)`` (a
    share, -1 to 1), resampling items, seeded.

    A resample's difference depends only on how many improved and regressed items it drew, so
    each replicate is one multinomial draw over (improved, regressed, same) with the observed
    shares: the same distribution as resampling item indices, in O(n_boot) memory."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level}")
    counts = paired_outcomes(direct_correct, method_correct)
    n = len(direct_correct)
    shares = np.array([counts["improved"], counts["regressed"], counts["same"]]) / n
    draws = np.random.default_rng(seed).multinomial(n, shares, size=n_boot)
    tail = (1 - level) / 2
    low, high = np.quantile((draws[:, 0] - draws[:, 1]) / n, [tail, 1 - tail])
    return float(low), float(high)


def compare_paired(
    gold: Sequence[str],
    direct_winners: Sequence[str | None],
    method_winners: Sequence[str | None],
    *,
    seed: int = 0,
) -> dict:
    """A method against the direct baseline on the same items (METHOD.md, Evaluation), from
    each item's gold id and both winners (None = abstention): accuracies, ``delta_points``,
    :func:`paired_outcomes`, abstentions, ``usable_pairs`` (items at least one of the two
    decided), ``mcnemar_p`` and ``ci_points`` (95% bootstrap), both None (undefined) without a
    usable pair: items both abstained on say nothing about the difference."""
    _check_aligned(gold, direct_winners, "gold and direct_winners")
    _check_aligned(gold, method_winners, "gold and method_winners")
    if any(g is None for g in gold):
        raise ValueError("every item needs a gold id; leave unlabelled items out")
    direct_correct = [w == g for w, g in zip(direct_winners, gold, strict=True)]
    method_correct = [w == g for w, g in zip(method_winners, gold, strict=True)]
    counts = paired_outcomes(direct_correct, method_correct)
    direct, method = accuracy(direct_winners, gold), accuracy(method_winners, gold)
    usable = sum(
        d is not None or m is not None for d, m in zip(direct_winners, method_winners, strict=True)
    )
    low, high = paired_bootstrap_ci(direct_correct, method_correct, seed=seed)
    return {
        "n": len(gold),
        "direct_accuracy": direct,
        "method_accuracy": method,
        "delta_points": 100 * (method - direct),
        **counts,
        "direct_abstentions": sum(w is None for w in direct_winners),
        "method_abstentions": sum(w is None for w in method_winners),
        "usable_pairs": usable,
        "mcnemar_p": mcnemar_exact(counts["improved"], counts["regressed"]) if usable else None,
        "ci_points": (100 * low, 100 * high) if usable else None,
    }
