"""Canonical order and the ordering schedules of METHOD.md (balanced, random, exhaustive,
repeated), plus the candidate x slot coverage matrix."""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence

import numpy as np

from pcf.choices import SCHEDULES

MAX_EXHAUSTIVE_N = 6

Order = tuple[str, ...]


def seeded_rng(*parts: object) -> np.random.Generator:
    """A generator seeded by a hash of ``parts``: stable across runs, machines and Pythons."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def canonical_order(candidate_ids: Sequence[str], dataset_seed: int, item_id: str) -> Order:
    """The direct baseline's ordering: a shuffle seeded by ``(dataset_seed, item_id)``, so a
    dataset that stores the gold answer first does not leak it (the gold slot is uniform)."""
    perm = seeded_rng("canonical", dataset_seed, item_id).permutation(len(candidate_ids))
    return tuple(candidate_ids[i] for i in perm)


def _rotations(order: Order) -> list[Order]:
    return [order[i:] + order[:i] for i in range(len(order))]


def _fresh_rotation_block(
    canonical: Order, taken: list[Order], rng: np.random.Generator
) -> list[Order]:
    """The rotations of a seeded random permutation none of whose rotations is taken yet."""
    seen = set(taken)
    if len(seen) >= math.factorial(len(canonical)):
        return []
    for _ in range(500):  # draws before the schedule cycles through what it has
        base = tuple(canonical[i] for i in rng.permutation(len(canonical)))
        block = _rotations(base)
        if seen.isdisjoint(block):
            return block
    return []


def schedule_length(kind: str, n: int, k: int) -> int:
    """How many orderings :func:`schedule` gives an item of ``n`` candidates: all n! for
    ``exhaustive``, K for the others."""
    return math.factorial(n) if kind == "exhaustive" else k


def schedule(
    kind: str,
    candidate_ids: Sequence[str],
    k: int,
    *,
    dataset_seed: int,
    item_id: str,
    seed: int = 0,
) -> list[Order]:
    """The K orderings of one item of :data:`pcf.choices.SCHEDULES` (``exhaustive``: all n!),
    the canonical order first (fixed by ``dataset_seed`` and the item alone, so every run of a
    dataset shares one direct baseline); ``seed``: the run's, for the random draws.

    ``balanced``: the rotations of the canonical order, then of its reverse, then of seeded
    random permutations (Latin squares and cycling: docs/choices.md, "Balanced schedule").
    """
    if k < 1:
        raise ValueError(f"K must be at least 1, got {k}")
    canonical = canonical_order(candidate_ids, dataset_seed, item_id)
    n = len(canonical)
    rng = seeded_rng(kind, seed, item_id)
    if kind == "repeated":
        return [canonical] * k
    if kind == "exhaustive":
        if n > MAX_EXHAUSTIVE_N:
            raise ValueError(
                f"exhaustive schedule needs n <= {MAX_EXHAUSTIVE_N} candidates "
                f"({n}! orderings is too many); use balanced or random"
            )
        rest = [p for p in itertools.permutations(canonical) if p != canonical]
        return [canonical, *rest]
    if kind == "random":
        if k > math.factorial(n):
            raise ValueError(
                f"random schedule: K={k} exceeds the {math.factorial(n)} distinct "
                f"orderings of {n} candidates; use balanced or a smaller K"
            )
        distinct = dict.fromkeys([canonical])  # a dict keeps the orders drawn in turn
        while len(distinct) < k:
            distinct[tuple(canonical[i] for i in rng.permutation(n))] = None
        return list(distinct)
    if kind == "balanced":
        rows = _rotations(canonical) + _rotations(canonical[::-1])
        while len(rows) < k and (block := _fresh_rotation_block(canonical, rows, rng)):
            rows += block
        return list(itertools.islice(itertools.cycle(rows), k))
    raise ValueError(f"unknown schedule {kind!r}; choose one of {', '.join(SCHEDULES)}")


def slot_coverage(orders: Sequence[Order], candidate_ids: Sequence[str]) -> np.ndarray:
    """Counts of how often each candidate (rows, in ``candidate_ids`` order) sat in each slot."""
    index = {cid: i for i, cid in enumerate(candidate_ids)}
    counts = np.zeros((len(candidate_ids), len(candidate_ids)), dtype=int)
    for order in orders:
        for slot, cid in enumerate(order):
            counts[index[cid], slot] += 1
    return counts
