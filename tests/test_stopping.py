"""Adaptive stopping (pcf/stopping.py): `certain` keeps the full run's winner by construction,
`confident` estimates the chance of a change, and both stop within the planned calls."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pcf.consensus import PRESETS
from pcf.stopping import (
    ItemCalls,
    StoppingPolicy,
    change_probability,
    current_winner,
    is_certain,
    replay,
)
from tests.factories import judgment, random_judgments

IDS = ("a", "b", "c", "d", "e")


def full_winner(calls, weights) -> int:
    return current_winner(ItemCalls("i", IDS[: len(calls[0].order)], tuple(calls)), weights)


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
