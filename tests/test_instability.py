"""Instability metrics, flags, review priority and dataset-level slot bias."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from pcf.consensus import pack
from pcf.decisions import aggregate, decide
from pcf.flags import FLAG_HELP, FLAGS, raise_flags
from pcf.instability import slot_bias
from pcf.weights import PRESETS

from .factories import judgment


def test_identical_rankings_are_stable():
    calls = [
        judgment("x", c, order, {"a": 9, "b": 5, "c": 1})
        for c, order in enumerate(["abc", "bca", "cab"])
    ]
    [r] = aggregate(calls)
    m = r["metrics"]
    assert (m["top_agreement"], m["top_entropy"], m["kendall_w"]) == (1.0, 0.0, 1.0)
    # a sat in slots 1, 3, 2: the top pick followed no slot more than once.
    assert m["slot_following"] == pytest.approx(1 / 3)
    assert r["flags"] == []


def test_position_driven_judge():
    # The judge always picks whatever is shown first: 4 calls, 4 different winners.
    orders = ["abcd", "bcda", "cdab", "dabc"]
    calls = [
        judgment("x", c, o, {cid: (9 if cid == o[0] else 3) for cid in "abcd"})
        for c, o in enumerate(orders)
    ]
    [r] = aggregate(calls)
    m = r["metrics"]
    assert m["top_agreement"] == 0.25
    assert m["top_entropy"] == pytest.approx(1.0)
    assert m["slot_following"] == 1.0
    assert {"order_unstable", "position_driven", "near_tie"} <= set(r["flags"])


def test_kendall_w_by_hand():
    # Rankings (a,b,c), (a,c,b): rank sums a=2, b=5, c=5; mean 4; S = 4+1+1 = 6; W = 12*6/(4*24).
    calls = [
        judgment("x", 0, "abc", {"a": 9, "b": 5, "c": 1}),
        judgment("x", 1, "abc", {"a": 9, "b": 1, "c": 5}),
    ]
    [r] = aggregate(calls)
    assert r["metrics"]["kendall_w"] == pytest.approx(12 * 6 / (4 * 24))


def test_margin_overrides_and_incomplete():
    calls = [
        judgment("x", 0, "ab", {"a": 6, "b": 5}),  # direct picks a
        judgment("x", 1, "ba", {"a": 2, "b": 9}),
        judgment("x", 2, "ab", {"a": 2, "b": 9}),
        judgment("x", 3, "ba", {}, ok=False),
    ]
    [r] = aggregate(calls)
    assert r["winner"] == "b"
    assert r["metrics"]["direct_winner"] == "a"
    c = r["consensus"]
    assert r["metrics"]["margin"] == pytest.approx(c["b"] - c["a"], abs=2e-6)
    assert set(r["flags"]) == {"order_unstable", "overrides_direct", "incomplete"}
    assert (r["metrics"]["n_ok"], r["metrics"]["n_calls"]) == (3, 4)


def test_overrides_direct_is_raised_when_the_direct_call_failed():
    """No direct verdict while the consensus has a winner: PCF's answer is not the direct
    baseline's, so the item is flagged as overriding it (and incomplete)."""
    calls = [
        judgment("x", 0, "ab", {}, ok=False),  # the direct call
        judgment("x", 1, "ba", {"a": 9, "b": 2}),
    ]
    [r] = aggregate(calls)
    assert (r["winner"], r["metrics"]["direct_winner"]) == ("a", None)
    assert {"overrides_direct", "incomplete"} <= set(r["flags"])


def test_priority_puts_doubtful_items_first():
    stable = [judgment("s", c, o, {"a": 9, "b": 1}) for c, o in enumerate(["ab", "ba", "ab"])]
    shaky = [
        judgment("u", 0, "ab", {"a": 6, "b": 5}),
        judgment("u", 1, "ba", {"a": 5, "b": 6}),
        judgment("u", 2, "ab", {"a": 5, "b": 6}),
    ]
    dead = [judgment("d", 0, "ab", {}, ok=False)]
    records = {r["item_id"]: r["metrics"]["priority"] for r in aggregate(stable + shaky + dead)}
    assert records["d"] > records["u"] > records["s"]
    assert records["s"] == 0.0


def test_every_flag_has_an_explanation():
    assert set(FLAG_HELP) == set(FLAGS)


def test_slot_bias_counts_and_chi_square():
    # Three items, each judged twice; every top pick sat in slot 0.
    calls = []
    for item in "xyz":
        calls += [
            judgment(item, 0, "abc", {"a": 9, "b": 5, "c": 1}),
            judgment(item, 1, "bca", {"a": 1, "b": 9, "c": 5}),
        ]
    [arrays] = pack(calls)
    bias = slot_bias(arrays, gold=["a", "a", None])
    assert bias.top_counts.tolist() == [6, 0, 0]
    expected = stats.chisquare([6, 0, 0])
    assert bias.p_value == pytest.approx(expected.pvalue)
    # Gold 'a' was shown in slot 0 twice (picked) and slot 2 twice (not picked).
    assert bias.gold_recall[0] == 1.0
    assert bias.gold_recall[2] == 0.0
    assert math.isnan(bias.gold_recall[1])


def test_decide_on_packed_arrays_matches_records():
    calls = [
        judgment("x", c, o, {"a": 6 + c, "b": 5}) for c, o in enumerate(["ab", "ba", "ab", "ba"])
    ]
    [arrays] = pack(calls)
    d = decide(arrays)
    assert np.array_equal(d.instability.n_ok, [4])
    assert d.records()[0]["winner"] == "a"


@pytest.mark.parametrize(("high", "low"), [(1.5, 1.0), (5.5, 5.0), (9.5, 9.0), (0.5, 0.0)])
def test_near_tie_is_not_raised_at_exactly_the_threshold(high, low):
    # Score-only, n=2, K=1: the margin is (high - low) / 10 = 0.05 exactly, whatever the rounding.
    [r] = aggregate([judgment("x", 0, "ab", {"a": high, "b": low})], weights=PRESETS["score-only"])
    assert r["metrics"]["margin"] == pytest.approx(0.05)
    assert "near_tie" not in r["flags"]
    [below] = aggregate(
        [judgment("x", 0, "ab", {"a": high - 0.01, "b": low})], weights=PRESETS["score-only"]
    )
    assert "near_tie" in below["flags"]


def test_thresholds_use_the_tie_tolerance():
    flags = raise_flags(
        has_ok=np.ones(4, dtype=bool),
        top_agreement=np.array([1 - 1e-12, 0.6 - 1e-12, 0.6 - 1e-6, 1.0]),
        overrides=np.zeros(4, dtype=bool),
        margin=np.array([0.05 - 1e-12, 0.05 - 1e-6, 0.3, np.nan]),
        slot_following=np.array([0.6 - 1e-12, 0.6 - 1e-12, 0.6 - 1e-12, 0.2]),
        failed=np.zeros(4, dtype=bool),
    )
    assert flags["order_unstable"].tolist() == [False, True, True, False]
    assert flags["near_tie"].tolist() == [False, True, False, False]
    assert flags["position_driven"].tolist() == [False, False, True, False]


def test_unanimous_entropy_is_positive_zero():
    calls = [judgment("x", c, "abc", {"a": 9, "b": 5, "c": 1}) for c in range(3)]
    [r] = aggregate(calls)
    assert math.copysign(1.0, r["metrics"]["top_entropy"]) == 1.0
    assert "-0.0" not in json.dumps(r)
