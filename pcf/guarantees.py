"""Guarantees calibrated on data, not on a model (METHOD.md): fixed-sequence testing with exact
binomial bounds ("Learn then Test", Angelopoulos et al., 2021), shared by calibrated adaptive
stopping and trust-or-escalate.

A threshold's risk is the chance of an error (a changed winner, a disagreement with gold) on a
random item it applies to. Thresholds are tested in a fixed order, safest first: each passes when
the one-sided Clopper-Pearson upper bound of its error rate at confidence 1 - delta is at most
``level``, and testing stops at the first that fails. Every passed threshold then has risk at
most ``level``, all at once, with probability at least 1 - delta, whatever the judge."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

from pcf.orderings import seeded_rng


def upper_bound(errors: int, n: int, delta: float) -> float:
    """The exact (Clopper-Pearson) upper bound at confidence 1 - delta of an error rate seen as
    ``errors`` of ``n``; 1 without items."""
    from scipy.stats import beta  # noqa: PLC0415 - scipy.stats loads slowly

    return 1.0 if errors >= n else float(beta.ppf(1 - delta, errors + 1, n - errors))


def fixed_sequence(tests: Iterable[tuple[int, int]], level: float, delta: float) -> int:
    """How many of ``tests`` (errors, items), in their order, pass before the first failure."""
    return sum(1 for _ in itertools.takewhile(lambda t: upper_bound(*t, delta) <= level, tests))


def smallest_sample(level: float, delta: float) -> int:
    """The fewest items on which any threshold can pass (no error at all among them)."""
    return math.ceil(math.log(delta) / math.log(1 - level))


def random_order(keys: Sequence[str], size: int, *seed: object) -> list[str]:
    """``size`` of ``keys`` drawn at random, seeded by ``seed`` (the same keys, the same draw),
    in the order drawn."""
    return [str(key) for key in seeded_rng("calibration", *seed).permutation(sorted(keys))[:size]]


def random_sample(keys: Sequence[str], size: int, *seed: object) -> set[str]:
    """The keys of :func:`random_order`, as a set. Each guarantee seeds its own draw with its
    purpose (``"escalate"``, ``"labelling"``...) beside the seed, never reusing another's."""
    return set(random_order(keys, size, *seed))
