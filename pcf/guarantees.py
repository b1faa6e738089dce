"""Guarantees calibrated on data, not on a model (METHOD.md): fixed-sequence testing with exact
binomial bounds ("Learn then Test", Angelopoulos et al., 2021), shared by calibrated adaptive
stopping and trust-or-escalate.

A threshold's risk is the chance of an error (a changed winner, a disagreement with gold) on a
random item it applies to. Thresholds are tested in a fixed order, safest first: each passes when
the one-sided Clopper-Pearson upper bound of its error rate at confidence 1 - delta is at most
``level``, and testing stops at the first that fails. Every passed threshold then has risk at
most ``level``, all at once, with probability at least 1 - delta, whatever the judge.

That bounds the risk of a new item. On a finite set of items split at random, a lucky sample
implies an unlucky rest: a promise about the realized error rate on the set's other items
tests the hypergeometric bound of :func:`rest_upper_bound` instead (``population`` given)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np

from pcf.orderings import seeded_rng


def upper_bound(errors: int, n: int, delta: float) -> float:
    """The exact (Clopper-Pearson) upper bound at confidence 1 - delta of an error rate seen as
    ``errors`` of ``n``; 1 without items."""
    from scipy.stats import beta  # noqa: PLC0415 - scipy.stats loads slowly

    return 1.0 if errors >= n else float(beta.ppf(1 - delta, errors + 1, n - errors))


def rest_upper_bound(errors: int, sample: int, population: int, delta: float) -> float:
    """The exact upper bound at confidence 1 - delta of the error rate on the ``population -
    sample`` other items of a finite set, from ``errors`` in a ``sample`` drawn from it at random
    without replacement: the largest total T whose chance of at most ``errors`` in the sample
    (hypergeometric) exceeds delta, less ``errors``, over the other items; 0 without any."""
    from scipy.stats import hypergeom  # noqa: PLC0415 - scipy.stats loads slowly

    rest = population - sample
    if rest <= 0:
        return 0.0
    totals = np.arange(errors, errors + rest + 1)
    kept = totals[hypergeom.cdf(errors, population, totals, sample) > delta]
    return (int(kept.max()) - errors) / rest


def fixed_sequence(
    tests: Iterable[tuple[int, int]], level: float, delta: float, *, population: int | None = None
) -> int:
    """How many of ``tests`` (errors, items), in their order, pass before the first failure:
    on the risk of a new item, or with ``population`` on the error rate of the set's other items."""

    def passes(test: tuple[int, int]) -> bool:
        if population is None:
            return upper_bound(*test, delta) <= level
        return rest_upper_bound(*test, population, delta) <= level

    return sum(1 for _ in itertools.takewhile(passes, tests))


def smallest_sample(level: float, delta: float, population: int | None = None) -> int:
    """The fewest items on which any threshold can pass (no error at all among them): of a
    ``population``, when given, the fewest for the rate on its other items (all of them when
    none can)."""
    if population is None:
        return math.ceil(math.log(delta) / math.log(1 - level))
    return next(
        (
            m
            for m in range(1, population)
            if fixed_sequence([(0, m)], level, delta, population=population)
        ),
        population,
    )


def random_order(keys: Sequence[str], size: int, *seed: object) -> list[str]:
    """``size`` of ``keys`` drawn at random, seeded by ``seed`` (the same keys, the same draw),
    in the order drawn."""
    return [str(key) for key in seeded_rng("calibration", *seed).permutation(sorted(keys))[:size]]


def random_sample(keys: Sequence[str], size: int, *seed: object) -> set[str]:
    """The keys of :func:`random_order`, as a set. Each guarantee seeds its own draw with its
    purpose (``"escalate"``, ``"labelling"``...) beside the seed, never reusing another's."""
    return set(random_order(keys, size, *seed))
