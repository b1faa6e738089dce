"""Eq. 5 consensus, tie rule, executions, rules and the properties METHOD.md implies."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pcf.choices import RULES
from pcf.consensus import consensus, kemeny, pack, winners
from pcf.decisions import aggregate, decide
from pcf.judgments import Judgment
from pcf.weights import PRESETS, Weights

from .factories import METHOD_PRESETS, judgment, random_judgments


def test_eq5_by_hand():
    # Two calls over (a, b, c). Call 1: a 8, b 6, c 2; call 2 (order c, b, a): b 9, a 7, c 1.
    calls = [
        judgment("x", 0, "abc", {"a": 8, "b": 6, "c": 2}, risk={"a": 0.2, "b": 0.4, "c": 0.9}),
        judgment("x", 1, "cba", {"a": 7, "b": 9, "c": 1}, risk={"a": 0.3, "b": 0.1, "c": 0.5}),
    ]
    [arrays] = pack(calls)
    result = consensus(arrays, PRESETS["proposed"])
    s = {"a": 0.75, "b": 0.75, "c": 0.15}
    b = {"a": (1.0 + 0.5) / 2, "b": (0.5 + 1.0) / 2, "c": 0.0}
    v = {"a": 0.5, "b": 0.5, "c": 0.0}
    u = {"a": 1 - 0.25, "b": 1 - 0.25, "c": 1 - 0.7}
    for col, cid in enumerate(arrays.candidate_ids[0]):
        expected = 0.5 * s[cid] + 0.25 * b[cid] + 0.2 * v[cid] + 0.05 * u[cid]
        assert result.score[0, col] == pytest.approx(expected)
    # a and b tie exactly on C, V, B and S: the candidate listed first (a) wins.
    assert result.winner_ids(arrays) == ["a"]


def test_tie_broken_by_vote_then_borda():
    # Same C for a and b by construction, but b has the larger V.
    w = Weights(1, 0, 0, 0)
    calls = [
        judgment("x", 0, "ab", {"a": 6, "b": 6}, ranking="ba"),
        judgment("x", 1, "ab", {"a": 6, "b": 6}, ranking="ba"),
    ]
    [arrays] = pack(calls)
    assert consensus(arrays, w).winner_ids(arrays) == ["b"]


def test_no_ok_judgment_abstains():
    calls = [judgment("x", 0, "ab", {}, ok=False), judgment("x", 1, "ba", {}, ok=False)]
    [record] = aggregate(calls)
    assert record["winner"] is None
    assert record["flags"] == ["incomplete"]
    assert record["metrics"]["n_ok"] == 0


def test_several_executions_average_per_execution_consensus():
    # Execution 0 says a clearly; execution 1 says b barely; execution 2 has only failures.
    calls = [
        judgment("x", 0, "ab", {"a": 10, "b": 0}, execution=0),
        judgment("x", 0, "ab", {"a": 4, "b": 5}, execution=1),
        judgment("x", 0, "ab", {}, execution=2, ok=False),
    ]
    [arrays] = pack(calls)
    result = consensus(arrays, Weights(1, 0, 0, 0))
    assert result.score[0].tolist() == pytest.approx([(1.0 + 0.4) / 2, (0.0 + 0.5) / 2])
    assert result.winner_ids(arrays) == ["a"]


def test_weights_parse_and_validation():
    assert Weights.parse("0.5, 0.25,0.2,0.05") == PRESETS["proposed"]
    with pytest.raises(ValueError, match="four numbers"):
        Weights.parse("1,2")
    with pytest.raises(ValueError, match="non-negative"):
        Weights(-1, 1, 0, 0)
    with pytest.raises(ValueError, match="not all zero"):
        Weights(0, 0, 0, 0)


def test_presets_match_the_weight_table():
    assert {name: w.as_tuple() for name, w in PRESETS.items()} == METHOD_PRESETS


def _brute_kemeny(rankings: list[tuple[str, ...]], ids: tuple[str, ...]) -> str:
    def distance(a, b):
        pos = {c: i for i, c in enumerate(b)}
        return sum(pos[x] > pos[y] for x, y in itertools.combinations(a, 2))

    best = min(
        itertools.permutations(range(len(ids))),
        key=lambda p: sum(distance(tuple(ids[i] for i in p), r) for r in rankings),
    )
    return ids[best[0]]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 5), st.integers(1, 6))
def test_kemeny_matches_brute_force(seed, n, k):
    rng = random.Random(seed)
    ids = tuple(f"c{i}" for i in range(n))
    calls = random_judgments(rng, "x", ids, k)
    [arrays] = pack(calls, {"x": ids})
    expected = _brute_kemeny([j.ranking for j in calls], ids)
    rankings, exact = kemeny(arrays)
    assert exact
    assert arrays.candidate_ids[0][rankings[0, 0]] == expected


def _disagreements(ranking, rankings) -> int:
    pos = {c: i for i, c in enumerate(ranking)}
    return sum(pos[x] > pos[y] for r in rankings for x, y in itertools.combinations(r, 2))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(7, 9), st.integers(1, 5))
def test_kemeny_beyond_six_is_a_reported_local_optimum(seed, n, k):
    rng = random.Random(seed)
    ids = tuple(f"c{i}" for i in range(n))
    calls = random_judgments(rng, "x", ids, k)
    [record] = aggregate(calls, rule="kemeny")
    assert record["metrics"]["kemeny_search"] == "local"
    ranking = record["ranking"]
    assert sorted(ranking) == sorted(ids)
    assert record["winner"] == ranking[0]
    rankings = [j.ranking for j in calls]
    cost = _disagreements(ranking, rankings)
    for c in ranking:  # no single move of one candidate lowers the disagreements
        rest = [x for x in ranking if x != c]
        for to in range(n):
            assert _disagreements([*rest[:to], c, *rest[to:]], rankings) >= cost


def test_kemeny_beyond_six_follows_unanimous_judges():
    ids = tuple(f"c{i}" for i in range(8))
    agreed = ("c3", "c0", "c7", "c1", "c6", "c2", "c5", "c4")
    scores = dict.fromkeys(ids, 5.0)
    calls = [judgment("x", i, ids[i:] + ids[:i], scores, ranking=agreed) for i in range(3)]
    [record] = aggregate(calls, rule="kemeny")
    assert record["ranking"] == list(agreed)
    [small] = aggregate([judgment("y", 0, "abc", {"a": 1, "b": 5, "c": 3})], rule="kemeny")
    assert small["metrics"]["kemeny_search"] == "exact"
    assert small["ranking"] == ["b", "c", "a"]


# ------------------------------------------------------------------ properties

items_strategy = st.tuples(
    st.integers(0, 10_000),  # seed
    st.integers(2, 5),  # n
    st.integers(1, 7),  # K
    st.integers(1, 3),  # executions
)


def _decisions_by_item(calls, listing=None, **kw):
    return (
        {r["item_id"]: r for r in aggregate(calls, **kw)}
        if listing is None
        else {r["item_id"]: r for r in aggregate(calls, items=listing, **kw)}
    )


@settings(max_examples=80, deadline=None)
@given(items_strategy, st.sampled_from(sorted(PRESETS)))
def test_renaming_candidates_leaves_consensus_unchanged(params, preset):
    seed, n, k, e = params
    rng = random.Random(seed)
    ids = tuple(f"c{i}" for i in range(n))
    calls = random_judgments(rng, "x", ids, k, e, fail_rate=0.2)
    new_names = [f"z{rng.randint(0, 10**6)}_{i}" for i in range(n)]
    rename = dict(zip(ids, new_names, strict=True))

    def renamed(j: Judgment) -> Judgment:
        return Judgment(
            j.item_id,
            j.execution,
            j.call_index,
            tuple(rename[c] for c in j.order),
            j.ok,
            j.error,
            {rename[c]: v for c, v in j.factuality.items()},
            {rename[c]: v for c, v in j.hallucination_risk.items()},
            tuple(rename[c] for c in j.ranking),
            j.confidence,
        )

    before = aggregate(calls, weights=PRESETS[preset])[0]
    after = aggregate([renamed(j) for j in calls], weights=PRESETS[preset])[0]
    assert after["winner"] == (rename[before["winner"]] if before["winner"] else None)
    assert after["consensus"] == {rename[c]: v for c, v in before["consensus"].items()}
    assert after["flags"] == before["flags"]
    assert after["metrics"]["direct_winner"] == (
        rename[before["metrics"]["direct_winner"]] if before["metrics"]["direct_winner"] else None
    )


@settings(max_examples=80, deadline=None)
@given(items_strategy, st.randoms(use_true_random=False))
def test_reordering_judgments_leaves_decisions_unchanged(params, shuffler):
    seed, n, k, e = params
    rng = random.Random(seed)
    ids = tuple(f"c{i}" for i in range(n))
    calls = random_judgments(rng, "x", ids, k, e, fail_rate=0.2)
    calls += random_judgments(rng, "y", ids, k, e, fail_rate=0.2)
    shuffled = list(calls)
    shuffler.shuffle(shuffled)
    listing = {"x": ids, "y": ids}
    a = {r["item_id"]: r for group in pack(calls, listing) for r in decide(group).records()}
    b = {r["item_id"]: r for group in pack(shuffled, listing) for r in decide(group).records()}
    assert a == b


@settings(max_examples=80, deadline=None)
@given(items_strategy, st.sampled_from(sorted(PRESETS)), st.data())
def test_unanimous_judgments_elect_their_pick(params, preset, data):
    seed, n, k, e = params
    rng = random.Random(seed)
    ids = tuple(f"c{i}" for i in range(n))
    pick = data.draw(st.sampled_from(ids))
    calls = []
    for ex in range(e):
        for c in range(k):
            order = list(ids)
            rng.shuffle(order)
            scores = {cid: float(rng.randint(0, 8)) for cid in ids}
            scores[pick] = 9.0 + rng.random()
            risk = {cid: rng.uniform(0.3, 1.0) for cid in ids}
            risk[pick] = rng.uniform(0.0, 0.29)
            rest = [cid for cid in ids if cid != pick]
            rng.shuffle(rest)
            calls.append(
                judgment("x", c, order, scores, execution=ex, risk=risk, ranking=[pick, *rest])
            )
    for rule in RULES:
        [arrays] = pack(calls)
        assert arrays.candidate_ids[0][winners(arrays, rule, PRESETS[preset])[0]] == pick


@settings(max_examples=80, deadline=None)
@given(items_strategy, st.sampled_from(RULES))
def test_k1_equals_direct(params, rule):
    seed, n, k, e = params
    rng = random.Random(seed)
    ids = tuple(f"c{i}" for i in range(n))
    calls = random_judgments(rng, "x", ids, k, e, fail_rate=0.3)
    [arrays] = pack(calls, {"x": ids})
    d = decide(arrays, k=1, executions=1, rule=rule)
    assert d.consensus.winner.tolist() == d.direct.winner.tolist()
    assert "overrides_direct" not in d.instability.flag_names(0)
    canonical = consensus(arrays.execution(0).prefix(k=1))  # call 0 of execution 0 alone
    assert canonical.winner.tolist() == decide(arrays, rule="eq5").direct.winner.tolist()


def test_k_prefix_uses_first_calls_only():
    calls = [
        judgment("x", 0, "ab", {"a": 9, "b": 1}),
        judgment("x", 1, "ba", {"a": 9, "b": 1}),
        judgment("x", 2, "ab", {"a": 0, "b": 10}),
        judgment("x", 3, "ba", {"a": 0, "b": 10}),
        judgment("x", 4, "ab", {"a": 0, "b": 10}),
    ]
    [arrays] = pack(calls)
    assert decide(arrays, k=2).consensus.winner_ids(arrays) == ["a"]
    assert decide(arrays, k=5).consensus.winner_ids(arrays) == ["b"]
    assert np.all(decide(arrays, k=3).arrays.ok.shape == (1, 1, 3))


def test_pack_rejects_calls_over_other_candidates():
    calls = [judgment("x", 0, "ab", {"a": 1, "b": 2}), judgment("x", 1, "ac", {"a": 1, "c": 2})]
    with pytest.raises(ValueError, match="item 'x'"):
        pack(calls)


def test_items_with_different_candidate_counts_aggregate_together():
    calls = [
        judgment("two", 0, "ab", {"a": 1, "b": 2}),
        judgment("three", 0, "abc", {"a": 3, "b": 2, "c": 1}),
    ]
    records = aggregate(calls)
    assert [(r["item_id"], r["winner"]) for r in records] == [("two", "b"), ("three", "a")]


@settings(max_examples=60, deadline=None)
@given(items_strategy, st.sampled_from(RULES))
def test_ranking_lists_every_candidate_winner_first(params, rule):
    seed, n, k, e = params
    rng = random.Random(seed)
    ids = tuple(f"c{i}" for i in range(n))
    [record] = aggregate(random_judgments(rng, "x", ids, k, e, fail_rate=0.2), rule=rule)
    if record["winner"] is None:
        assert record["ranking"] == []
        return
    assert sorted(record["ranking"]) == sorted(ids)
    assert record["ranking"][0] == record["winner"]
    if rule != "kemeny":
        c = [record["consensus"][cid] for cid in record["ranking"]]
        assert all(a >= b - 1e-6 for a, b in itertools.pairwise(c))


def test_ranking_breaks_ties_as_the_winner_does():
    # Equal scores: b has more top votes, then a and c tie everywhere: listing order.
    calls = [
        judgment("x", 0, "abc", dict.fromkeys("abc", 5.0), ranking="bac"),
        judgment("x", 1, "cab", dict.fromkeys("abc", 5.0), ranking="bca"),
    ]
    [record] = aggregate(calls, weights=Weights(1, 0, 0, 0))
    assert record["ranking"] == ["b", "a", "c"]


@st.composite
def judgment_files(draw):
    """Judgments of several items with gaps: executions numbered 0-3 with some left out, calls
    missing or failed, candidate counts shared by some items and not others."""
    rng = random.Random(draw(st.integers(0, 10**6)))
    calls = []
    for i in range(draw(st.integers(2, 6))):
        ids = tuple(f"c{c}" for c in range(draw(st.integers(2, 4))))
        executions = draw(st.sets(st.integers(0, 3), min_size=1, max_size=3))
        k = draw(st.integers(1, 4))
        for j in random_judgments(rng, f"item{i}", ids, k, max(executions) + 1, fail_rate=0.2):
            if j.execution in executions and rng.random() > 0.15:
                calls.append(j)
    return calls


@settings(max_examples=150, deadline=None)
@given(
    judgment_files(),
    st.sampled_from(RULES),
    st.sampled_from(sorted(PRESETS)),
    st.one_of(st.none(), st.integers(1, 4)),
    st.one_of(st.none(), st.integers(1, 3)),
)
def test_an_items_decision_never_depends_on_other_items(calls, rule, preset, k, executions):
    options = {"rule": rule, "weights": PRESETS[preset], "k": k, "executions": executions}
    together = {r["item_id"]: r for r in aggregate(calls, **options)}
    for item_id in {j.item_id for j in calls}:
        alone = aggregate([j for j in calls if j.item_id == item_id], **options)
        assert alone == [together[item_id]]


def test_executions_keeps_each_items_own_first_executions():
    # Item x has executions 0 and 2 (b wins both); item y has 0 and 1. With --executions 2,
    # x keeps 0 and 2 whatever y has, and its consensus is the same as judged alone.
    x = [
        judgment("x", 0, "ab", {"a": 6, "b": 4}, execution=0),
        judgment("x", 0, "ab", {"a": 0, "b": 10}, execution=2),
    ]
    y = [judgment("y", 0, "ab", {"a": 9, "b": 1}, execution=e) for e in (0, 1)]
    [alone] = aggregate(x, executions=2, weights=Weights(1, 0, 0, 0))
    records = aggregate(x + y, executions=2, weights=Weights(1, 0, 0, 0))
    assert records[0] == alone
    assert alone["consensus"] == {"a": pytest.approx(0.3), "b": pytest.approx(0.7)}
    assert alone["metrics"]["n_calls"] == 2
    [first] = aggregate(x + y, executions=1, weights=Weights(1, 0, 0, 0))[:1]
    assert first["metrics"]["n_calls"] == 1
    assert first["winner"] == "a"


def test_direct_is_execution_zero_call_zero():
    # An item without an execution 0 has no direct verdict, whatever other items have.
    calls = [
        judgment("x", 0, "ab", {"a": 1, "b": 9}, execution=1),
        judgment("y", 0, "ab", {"a": 9, "b": 1}, execution=0),
    ]
    x, y = aggregate(calls)
    assert x["metrics"]["direct_winner"] is None
    assert "overrides_direct" in x["flags"]
    assert y["metrics"]["direct_winner"] == "a"
