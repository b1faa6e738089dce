"""Canonical order and schedules."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pcf.choices import SCHEDULES
from pcf.orderings import canonical_order, schedule, slot_coverage

ids_strategy = st.integers(2, 6).map(lambda n: [f"c{i}" for i in range(n)])


@settings(max_examples=100, deadline=None)
@given(ids_strategy, st.integers(0, 100), st.text(min_size=1, max_size=8))
def test_balanced_with_k_equal_n_covers_every_slot_once(ids, seed, item_id):
    orders = schedule("balanced", ids, len(ids), dataset_seed=seed, item_id=item_id)
    assert (slot_coverage(orders, ids) == 1).all()


@settings(max_examples=100, deadline=None)
@given(ids_strategy, st.integers(1, 30), st.integers(0, 100), st.sampled_from(SCHEDULES))
def test_every_schedule_starts_canonical_and_permutes(ids, k, seed, kind):
    if kind == "random" and k > math.factorial(len(ids)):
        with pytest.raises(ValueError, match="exceeds"):
            schedule(kind, ids, k, dataset_seed=seed, item_id="i")
        return
    orders = schedule(kind, ids, k, dataset_seed=seed, item_id="i")
    assert orders[0] == canonical_order(ids, seed, "i")
    assert all(sorted(o) == sorted(ids) for o in orders)
    expected = math.factorial(len(ids)) if kind == "exhaustive" else k
    assert len(orders) == expected
    if kind in ("random", "exhaustive"):
        assert len(set(orders)) == len(orders)
    if kind == "repeated":
        assert set(orders) == {orders[0]}


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 6).map(lambda n: [f"c{i}" for i in range(n)]), st.integers(1, 4))
def test_balanced_multiple_of_n_is_slot_balanced(ids, multiple):
    n = len(ids)
    k = n * multiple
    orders = schedule("balanced", ids, k, dataset_seed=3, item_id="x")
    assert (slot_coverage(orders, ids) == multiple).all()


def test_balanced_n4_k7_layout():
    orders = schedule("balanced", list("abcd"), 7, dataset_seed=0, item_id="q")
    c = orders[0]
    assert orders[:4] == [c[i:] + c[:i] for i in range(4)]
    r = c[::-1]
    assert orders[4:] == [r[i:] + r[:i] for i in range(3)]
    assert (slot_coverage(orders[:4], list("abcd")) == 1).all()


def test_canonical_order_is_stable_and_spreads_the_gold_slot():
    ids = ["gold", "x", "y", "z"]
    assert canonical_order(ids, 0, "item-1") == canonical_order(ids, 0, "item-1")
    slots = Counter(canonical_order(ids, 0, f"item-{i}").index("gold") for i in range(4000))
    shares = np.array([slots[s] for s in range(4)]) / 4000
    assert np.all(np.abs(shares - 0.25) < 0.03)
    assert canonical_order(ids, 0, "item-1") != canonical_order(ids, 1, "item-1") or (
        canonical_order(ids, 0, "item-2") != canonical_order(ids, 1, "item-2")
    )


def test_exhaustive_refuses_more_than_six():
    with pytest.raises(ValueError, match="n <= 6"):
        schedule("exhaustive", [str(i) for i in range(7)], 7, dataset_seed=0, item_id="i")


def test_unknown_schedule_and_bad_k():
    with pytest.raises(ValueError, match="unknown schedule"):
        schedule("zigzag", ["a", "b"], 2, dataset_seed=0, item_id="i")
    with pytest.raises(ValueError, match="at least 1"):
        schedule("balanced", ["a", "b"], 0, dataset_seed=0, item_id="i")
