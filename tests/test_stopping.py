"""Adaptive stopping (pcf/stopping.py): `certain` keeps the full run's winner by construction,
`confident` estimates the chance of a change, and both stop within the planned calls, on
judges made to break the score model too (tests/recorded_judges.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pcf.orderings import schedule
from pcf.stopping import (
    DELTA,
    SLOT_PRIOR,
    ItemCalls,
    ScoreModel,
    StoppingPolicy,
    calibrate,
    change_probability,
    current_winner,
    gumbel_rows,
    in_waves,
    is_certain,
    ranking_log_likelihoods,
    ranks,
    replay_all,
    slot_basis,
    slot_prior_precision,
)
from pcf.weights import DEFAULT_WEIGHTS, PRESETS
from tests.factories import judgment, random_judgments, replay
from tests.recorded_judges import FAMILIES, GUARANTEE_FAMILIES, Replayed, record, recorded_item

IDS = ("a", "b", "c", "d", "e")


def full_winner(calls, weights) -> int:
    """The winner of every call (candidates listed in their first call's id order)."""
    ids = tuple(sorted(calls[0].order))
    return current_winner(ItemCalls(calls[0].item_id, ids, tuple(calls)), weights)


def upcoming(count: int, order: tuple[str, ...] = ("a", "b"), execution: int = 0) -> tuple:
    """``count`` calls still to come in ``execution``, all shown in ``order``."""
    return ((execution, order),) * count


def alternating(count: int) -> tuple:
    """``count`` calls still to come, in the orders (a, b) and (b, a) by turns."""
    return tuple((0, ("a", "b") if k % 2 else ("b", "a")) for k in range(count))


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(2, 5),
    k=st.integers(1, 7),
    executions=st.integers(1, 3),
    fail_rate=st.sampled_from([0.0, 0.2, 0.6]),
    preset=st.sampled_from(sorted(PRESETS)),
)
def test_certain_stops_on_the_full_runs_winner(seed, n, k, executions, fail_rate, preset):
    calls = random_judgments(random.Random(seed), "i", IDS[:n], k, executions, fail_rate)
    weights = PRESETS[preset]
    stop = replay(StoppingPolicy("certain", weights=weights), "i", IDS[:n], calls)
    assert stop.winner == full_winner(calls, weights)
    assert 1 <= stop.calls <= len(calls)


def test_certain_stops_early_on_a_clear_winner_and_not_on_a_close_one():
    clear = [
        judgment("i", c, ("a", "b"), {"a": 10, "b": 0}, execution=e, risk={"a": 0, "b": 1})
        for e in range(3)
        for c in range(7)
    ]
    stop = replay(StoppingPolicy("certain"), "i", ("a", "b"), clear)
    assert stop.reason == "certain"
    # Each execution needs more than half of its calls: 4 of 7, three times, minus the last.
    assert stop.calls < 21
    close = [
        judgment("i", c, ("a", "b"), {"a": 6, "b": 5} if c % 2 else {"a": 5, "b": 6})
        for c in range(7)
    ]
    assert replay(StoppingPolicy("certain"), "i", ("a", "b"), close).calls == 7


def test_a_remaining_call_may_fail_or_reverse_everything():
    """Two calls for a, one left: that call could give b everything, so a is not certain."""
    made = tuple(judgment("i", c, ("a", "b"), {"a": 9, "b": 1}) for c in range(2))
    assert not is_certain(ItemCalls("i", ("a", "b"), made, upcoming(2)))
    assert is_certain(ItemCalls("i", ("a", "b"), made, upcoming(1)))
    # No ok call yet: every remaining call may fail, so nothing is certain.
    failed = (judgment("i", 0, ("a", "b"), {}, ok=False),)
    assert not is_certain(ItemCalls("i", ("a", "b"), failed, upcoming(1)))
    assert is_certain(ItemCalls("i", ("a", "b"), failed))


def test_an_execution_not_started_counts_at_its_worst():
    made = tuple(judgment("i", c, ("a", "b"), {"a": 10, "b": 0}) for c in range(7))
    assert is_certain(ItemCalls("i", ("a", "b"), made))
    assert not is_certain(ItemCalls("i", ("a", "b"), made, upcoming(1, execution=1)))


def test_the_change_probability_falls_as_agreeing_calls_come_in():
    def probability(made: int) -> float:
        calls = tuple(judgment("i", c, IDS[:3], {"a": 7, "b": 6, "c": 1}) for c in range(made))
        return change_probability(ItemCalls("i", IDS[:3], calls, upcoming(10 - made, IDS[:3])))

    estimates = [probability(m) for m in (1, 3, 6, 9)]
    assert estimates == sorted(estimates, reverse=True)
    assert estimates[0] > 0.05 > estimates[-1]
    assert probability(3) == probability(3)  # seeded


def _two_calls(first: dict[str, float], second: dict[str, float]) -> ItemCalls:
    calls = (judgment("i", 0, ("a", "b"), first), judgment("i", 1, ("b", "a"), second))
    return ItemCalls("i", ("a", "b"), calls, alternating(19))


def test_the_score_gap_tells_a_clear_item_from_a_near_tie_with_the_same_votes():
    """Both items: a ranked first and voted for twice. Only the scores differ."""
    clear = change_probability(_two_calls({"a": 9, "b": 2}, {"a": 9, "b": 2}))
    near_tie = change_probability(_two_calls({"a": 6, "b": 5.5}, {"a": 6, "b": 5.5}))
    assert clear < 0.01
    assert near_tie > 0.1


def test_a_judge_whose_scores_wobble_is_trusted_less_than_a_steady_one():
    """The same mean lead of 2 points; the wobbly judge's scores move between the calls."""
    steady = change_probability(_two_calls({"a": 7, "b": 5}, {"a": 7, "b": 5}))
    wobbly = change_probability(_two_calls({"a": 9, "b": 4}, {"a": 5, "b": 6}))
    assert steady < wobbly


def test_a_lead_seen_only_from_the_first_slot_is_trusted_less():
    """Same scores twice; once a held the first slot both times, once it led from either slot.
    With the orders to come taking turns, the first lead may be the judge's position bias."""
    scores = {"a": 7, "b": 5}
    from_either = (judgment("i", 0, ("a", "b"), scores), judgment("i", 1, ("b", "a"), scores))
    from_first = (judgment("i", 0, ("a", "b"), scores), judgment("i", 1, ("a", "b"), scores))
    earned = change_probability(ItemCalls("i", ("a", "b"), from_either, alternating(19)))
    placed = change_probability(ItemCalls("i", ("a", "b"), from_first, alternating(19)))
    assert 2 * earned < placed


def test_disagreeing_calls_keep_the_change_probability_high():
    calls = tuple(
        judgment("i", c, ("a", "b"), {"a": 9, "b": 1} if c % 2 else {"a": 1, "b": 9.5})
        for c in range(4)
    )
    assert change_probability(ItemCalls("i", ("a", "b"), calls, alternating(6))) > 0.2


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6), k=st.integers(1, 7), risk=st.sampled_from([0.05, 0.01]))
def test_confident_never_goes_past_the_planned_calls(seed, k, risk):
    calls = random_judgments(random.Random(seed), "i", IDS[:3], k, 2, 0.1)
    stop = replay(StoppingPolicy("confident", risk=risk), "i", IDS[:3], calls)
    assert 1 <= stop.calls <= len(calls)
    assert stop.reason in ("confident", "planned_calls_made")


@pytest.mark.parametrize(("name", "risk"), [("vote", 0.01), ("confident", 0.0), ("certain", 1.5)])
def test_bad_policies_are_refused(name, risk):
    with pytest.raises(ValueError, match=r"policy|risk"):
        StoppingPolicy(name, risk=risk)


def test_waves_take_one_call_of_each_execution_in_turn():
    planned = [
        judgment("i", c, order, {"a": 5, "b": 4, "c": 3}, execution=e)
        for e in range(3)
        for c, order in enumerate((("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b")))
    ]
    waves = [(j.execution, j.call_index) for j in in_waves(planned)]
    # The canonical call opens; every execution has answered after three calls, each in
    # another ordering; then round after round.
    assert waves[:3] == [(0, 0), (1, 1), (2, 2)]
    assert waves[3:6] == [(0, 1), (1, 2), (2, 0)]
    assert sorted(waves) == sorted((j.execution, j.call_index) for j in planned)


def test_every_slot_has_the_same_prior_spread_and_the_effects_sum_to_zero():
    for n in range(2, 7):
        basis = slot_basis(n)
        assert np.allclose(basis.sum(axis=0), 0)  # every effect B @ u sums to zero
        covariance = basis @ basis.T / slot_prior_precision(n)
        assert np.allclose(np.diag(covariance), SLOT_PRIOR**2)
    # A Latin square of one execution: every slot's posterior spread is the same too.
    ids = ("a", "b", "c", "d")
    rotations = [ids[s:] + ids[:s] for s in range(4)]
    calls = tuple(
        judgment("i", c, order, {"a": 8, "b": 6, "c": 5, "d": 3})
        for c, order in enumerate(rotations)
    )
    model = ScoreModel.fit(ItemCalls("i", ids, calls, ((0, ids),)), DEFAULT_WEIGHTS)
    slots = model.spread[4:] @ model.spread[4:].T
    variances = np.diag(slot_basis(4) @ slots @ slot_basis(4).T)
    assert np.allclose(variances, variances[0])


def _disagreeing_executions() -> list:
    """Two answers, K=7 x 3: (8, 6) in execution 0, (6, 8) in executions 1 and 2."""
    return [
        judgment(
            "i",
            c,
            ("a", "b") if c % 2 == 0 else ("b", "a"),
            {"a": 8, "b": 6} if e == 0 else {"a": 6, "b": 8},
            execution=e,
        )
        for e in range(3)
        for c in range(7)
    ]


@pytest.mark.parametrize("risk", [0.05, 0.01])
def test_confident_waits_for_executions_that_disagree(risk):
    calls = _disagreeing_executions()
    assert full_winner(calls, DEFAULT_WEIGHTS) == 1
    stop = replay(StoppingPolicy("confident", risk=risk), "i", ("a", "b"), calls)
    assert stop.winner == 1


def test_an_execution_that_has_not_answered_leaves_the_item_open():
    made = tuple(judgment("i", c, ("a", "b"), {"a": 10, "b": 0}) for c in range(7))
    assert change_probability(ItemCalls("i", ("a", "b"), made, upcoming(1, execution=1))) == 1.0
    failed = (*made, judgment("i", 0, ("a", "b"), {}, execution=1, ok=False))
    assert change_probability(ItemCalls("i", ("a", "b"), failed, upcoming(1, execution=1))) == 1


def test_ranks_follow_argsort_ties_included():
    """Rank 1 for the largest value; equal values (at the clip, say) in argsort's own order."""
    values = np.random.default_rng(3).integers(0, 4, size=(300, 3, 5)).astype(float)
    values[:100] += np.random.default_rng(4).random((100, 3, 5))  # rows without ties too
    expected = np.empty(values.shape, dtype=int)
    order = np.argsort(-values, axis=-1)
    np.put_along_axis(expected, order, np.arange(1, 6) + np.zeros_like(order), axis=-1)
    assert np.array_equal(ranks(values), expected)
    assert ranks(np.array([2.0, 7.0, 0.5, 9.0])).tolist() == [3, 2, 4, 1]


def _same_gumbels(rng: np.random.Generator, shape: tuple[int, int], rows: np.ndarray) -> None:
    """gumbel_rows on ``rows`` is rng.gumbel there, and leaves rng where rng.gumbel does."""
    copy = np.random.Generator(np.random.PCG64())
    copy.bit_generator.state = rng.bit_generator.state
    assert np.array_equal(gumbel_rows(rng, rows, np.empty(shape)), copy.gumbel(size=shape)[rows])
    assert rng.random() == copy.random()


@pytest.mark.parametrize(
    "rows", [[1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 0, 0, 1, 1], [0, 1, 1, 0, 1], [0, 0, 1, 0, 0]]
)
def test_gumbel_rows_are_the_generators_gumbels(rows):
    _same_gumbels(np.random.default_rng(11), (5, 6), np.array(rows, dtype=bool))


def test_gumbel_rows_after_a_uniform_of_zero():
    """PCG64 outputs 0 from a state whose halves are equal: rng.gumbel draws again there."""
    multiplier, inc, half = 0x2360ED051FC65DA44385DF649FCCF645, 0x1F, 0x0123456789ABCDEF
    state = (((half << 64 | half) - inc) * pow(multiplier, -1, 1 << 128)) % (1 << 128)
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": state, "inc": inc},
        "has_uint32": 0,
        "uinteger": 0,
    }
    copy = np.random.Generator(np.random.PCG64())
    copy.bit_generator.state = rng.bit_generator.state
    assert copy.random() == 0.0
    _same_gumbels(rng, (3, 4), np.array([False, True, False]))


def ranking_log_likelihood(score: np.ndarray, ranking: np.ndarray, noise: float) -> float:
    """The log likelihood of one call's ranking."""
    return float(ranking_log_likelihoods(score[None], ranking[None], noise)[0])


def test_the_ranking_likelihood_by_hand():
    score = np.array([8.0, 6.0, 6.0])
    # Ranked by the scores, the tie in either order: 1/2 at noise 0.
    assert ranking_log_likelihood(score, np.array([0, 1, 2]), 0.0) == pytest.approx(-np.log(2))
    assert ranking_log_likelihood(score, np.array([1, 0, 2]), 0.0) == -np.inf
    assert ranking_log_likelihood(score, np.array([1, 0, 2]), np.inf) == pytest.approx(-np.log(6))
    # Plackett-Luce at noise 1: e^6/(e^8+2e^6) for the first place, then e^8/(e^8+e^6).
    expected = 6 - np.log(np.exp(8) + 2 * np.exp(6)) + 8 - np.log(np.exp(8) + np.exp(6))
    assert ranking_log_likelihood(score, np.array([1, 0, 2]), 1.0) == pytest.approx(expected)


def test_rankings_against_the_scores_are_not_read_from_the_scores():
    """Rank-only weights: a leads by score in both calls; once, the rankings follow the scores;
    once, they contradict them by turns, and the scores say nothing of the rankings to come."""
    scores = {"a": 9, "b": 2}
    follow = (judgment("i", 0, ("a", "b"), scores), judgment("i", 1, ("b", "a"), scores))
    against = (
        judgment("i", 0, ("a", "b"), scores),
        judgment("i", 1, ("b", "a"), scores, ranking=("b", "a")),
        judgment("i", 2, ("a", "b"), scores),
    )
    rank_only = PRESETS["rank-only"]
    followed = change_probability(ItemCalls("i", ("a", "b"), follow, alternating(9)), rank_only)
    contradicted = change_probability(
        ItemCalls("i", ("a", "b"), against, alternating(8)), rank_only
    )
    assert followed < 0.01
    assert contradicted > 0.1


IDS6 = tuple("abcdef")


@pytest.mark.parametrize("family", FAMILIES)
def test_certain_keeps_the_full_runs_winner_on_recorded_judges(family):
    for number in range(40):
        ids, calls, weights = recorded_item(family, number, exhaustive_up_to=5)
        stop = replay(StoppingPolicy("certain", weights=weights), calls[0].item_id, ids, calls)
        assert stop.winner == full_winner(calls, weights), (family, number)


def test_certain_on_six_candidates_in_all_720_orders():
    orders = schedule("exhaustive", IDS6, 1, dataset_seed=0, item_id="x")
    calls = record("slot_outliers", "x", IDS6, orders, 1, seed=5)
    stop = replay(StoppingPolicy("certain"), "x", IDS6, calls)
    assert stop.winner == full_winner(calls, DEFAULT_WEIGHTS)
    assert stop.calls < 720


RISK = 0.1
CASES = 60


@pytest.mark.parametrize("family", FAMILIES)
def test_confident_changes_no_more_winners_than_its_risk_on_recorded_judges(family):
    """The realized share of items whose winner differs from the full run's stays within R
    plus three standard errors of that share (seeded cases, so the figure is fixed)."""
    changed = calls = 0
    for number in range(CASES):
        ids, planned, weights = recorded_item(family, number)
        policy = StoppingPolicy("confident", risk=RISK, weights=weights)
        stop = replay(policy, planned[0].item_id, ids, planned)
        changed += stop.winner != full_winner(planned, weights)
        calls += stop.calls
    assert changed / CASES <= RISK + 3 * math.sqrt(RISK * (1 - RISK) / CASES)
    assert calls < sum(len(recorded_item(family, m)[1]) for m in range(CASES))


@pytest.mark.parametrize("family", FAMILIES)
def test_policies_replayed_together_stop_where_each_alone_does(family):
    """Shared draws change no stop: risks that share their draws, ones that draw more (from the
    same stream, or not a whole number of batches), other weights, and ``certain`` in the same
    pass, on recorded judges made to break the policies."""
    for number in range(6):
        ids, planned, weights = recorded_item(family, number)
        policies = [
            StoppingPolicy("certain", weights=weights),
            *(StoppingPolicy("confident", risk=r, weights=weights) for r in (0.2, 0.05, 0.01)),
            StoppingPolicy("confident", risk=0.002, weights=weights),  # 10,000 draws
            StoppingPolicy("confident", risk=0.003, weights=weights),  # 6,667: a stream apart
            StoppingPolicy("confident", risk=0.05, weights=PRESETS["rank-only"]),
        ]
        alone = [replay(policy, planned[0].item_id, ids, planned) for policy in policies]
        assert replay_all(policies, planned[0].item_id, ids, planned) == alone, (family, number)


SEEDS = 100
"""Calibration draws per family and risk: the share of them whose other items change more than
R estimates the chance the promise breaks, with a standard error of sqrt(delta (1 - delta) /
SEEDS) = 0.03 where that chance is delta."""
SIZES = {
    "cheap": (60, {"most_candidates": 3, "most_executions": 2}),
    "full": (150, {}),
}
"""Items per family and their range: 2-3 candidates in 1-2 executions by default (quick), 2-6
in 1-3 (slow); the heavy sweep is ``benchmarks/guarantees.py``'s."""


@pytest.mark.parametrize("size", ["cheap", pytest.param("full", marks=pytest.mark.slow)])
@pytest.mark.parametrize("family", GUARANTEE_FAMILIES)
def test_calibrated_confident_keeps_its_promise_on_the_other_items(family, size):
    """Judges made to break the score model (simulated, replayed once under every threshold and
    under `certain`), and 100 calibration draws as a run of seed 0-99 makes them, at R = 0.05
    and 0.2: the realized change rate on the items outside the sample exceeds R in at most
    delta of the draws (plus two standard errors of that share), as the finite-set promise
    says; the threshold chosen is the one :func:`calibrate` chooses on the sample's calls."""
    cases, options = SIZES[size]
    items = Replayed.of(family, cases, **options)
    assert not items.changed[:, -1].any()  # `certain`, the fallback, keeps every winner
    for risk in (0.05, 0.2):
        runs = [items.calibrated(risk, seed) for seed in range(SEEDS)]
        above = np.mean([run.rate > risk for run in runs])
        assert above <= DELTA + 2 * math.sqrt(DELTA * (1 - DELTA) / SEEDS), (family, risk, above)
    # At R = 0.2, few calibration items: calibrate replays them again, cheaply.
    sample = [item for item, inside in zip(items.items, runs[0].inside, strict=True) if inside]
    assert calibrate(risk, DEFAULT_WEIGHTS, sample, len(items.keys)) == runs[0].calibration
