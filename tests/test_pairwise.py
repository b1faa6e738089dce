"""APOCJudge decisions, the ballpark heuristic and JudgeBench's official pairwise score."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pcf.pairwise import (
    ApocDecision,
    apoc_decide,
    bucket_scores,
    is_ballpark_question,
    needs_confirmation,
    official_outcome,
)
from pcf.prompts import TIE

DECISIONS = ["a", "b", TIE, None]
decisions = st.sampled_from(DECISIONS)


# ---------------------------------------------------------------- APOCJudge


@pytest.mark.parametrize(
    ("first", "second", "confirm", "ballpark", "expected"),
    [
        ("a", "a", None, False, ApocDecision("a", "a", False, False, "agree")),
        (TIE, TIE, "b", False, ApocDecision(TIE, TIE, False, False, "agree")),
        (None, None, "a", False, ApocDecision(None, None, False, False, "no_verdict")),
        ("a", None, "b", False, ApocDecision("a", "a", False, False, "no_proposal")),
        ("a", "b", "b", False, ApocDecision("b", "a", True, True, "confirmed")),
        ("a", "b", "a", False, ApocDecision("a", "a", True, False, "not_confirmed")),
        ("a", "b", None, False, ApocDecision("a", "a", True, False, "not_confirmed")),
        ("a", "b", "b", True, ApocDecision("a", "a", True, False, "guarded")),
        ("a", TIE, TIE, False, ApocDecision(TIE, "a", True, True, "confirmed")),
        # A missing direct verdict: call 2's verdict is an override needing confirmation.
        (None, "b", "b", False, ApocDecision("b", None, True, True, "confirmed")),
        (None, "b", "a", False, ApocDecision(None, None, True, False, "not_confirmed")),
        (None, "b", "b", True, ApocDecision(None, None, True, False, "guarded")),
    ],
)
def test_apoc_named_cases(first, second, confirm, ballpark, expected):
    assert apoc_decide(first, second, confirm, ballpark=ballpark) == expected


def test_guard_off_lets_ballpark_overrides_through():
    decision = apoc_decide("a", "b", "b", ballpark=True, guard=False)
    assert decision.verdict == "b"
    assert decision.override_accepted


@settings(max_examples=500)  # 256 combinations in all
@given(
    first=decisions,
    second=decisions,
    confirm=decisions,
    ballpark=st.booleans(),
    guard=st.booleans(),
)
def test_apoc_truth_table(first, second, confirm, ballpark, guard):
    decision = apoc_decide(first, second, confirm, ballpark=ballpark, guard=guard)
    assert decision.direct == first
    assert decision.verdict in (first, second)
    assert decision.override_accepted <= decision.override_proposed
    if first == second or second is None:
        assert decision.verdict == first
        assert not decision.override_proposed
    else:
        assert decision.override_proposed
        accepted = not (ballpark and guard) and confirm == second
        assert decision.override_accepted == accepted
        assert decision.verdict == (second if accepted else first)
    # Call 3 changes the verdict only where needs_confirmation says it matters.
    without_confirm = apoc_decide(first, second, None, ballpark=ballpark, guard=guard)
    if not needs_confirmation(first, second, ballpark=ballpark, guard=guard):
        assert decision == without_confirm
    else:
        assert apoc_decide(first, second, second, ballpark=ballpark, guard=guard).verdict == second


def test_needs_confirmation_exactly_when_an_unguarded_override_is_proposed():
    for first, second in itertools.product(DECISIONS, repeat=2):
        for ballpark, guard in itertools.product([False, True], repeat=2):
            proposed = apoc_decide(first, second, ballpark=ballpark, guard=guard).override_proposed
            expected = proposed and not (ballpark and guard)
            assert needs_confirmation(first, second, ballpark=ballpark, guard=guard) == expected


# ---------------------------------------------------------------- ballpark heuristic


@pytest.mark.parametrize(
    "prompt",
    [
        "Approximately how many people live in Tokyo?",
        "Estimate the number of piano tuners in Chicago.",
        "Roughly how far is the Moon from the Earth?",
        "What is the order of magnitude of the number of stars in the Milky Way?",
        "How many piano tuners are there in Chicago?",
        "How many species of beetles exist worldwide?",
        "Give me a ballpark figure for the cost of a wedding in Paris.",
        "About how many hours does a commercial flight from London to Sydney take?",
        "Obtain an estimate of the diameter of a helium molecule. (A) 5.78 Å (B) 3.92 Å",
        "Which of the following is closest to the mass of the Earth? "
        "(A) 6 × 10^24 kg (B) 6 × 10^20 kg (C) 6 × 10^30 kg",
        "Which of the following is closest to the probability? "
        r"$\textbf{(A) } \frac{2}{3} \qquad \textbf{(B) } \frac{3}{10}$",
        "The answer is most nearly:\nA. 12 m/s\nB. 15 m/s\nC. 20 m/s",
    ],
)
def test_ballpark_positives(prompt):
    assert is_ballpark_question(prompt)


@pytest.mark.parametrize(
    "prompt",
    [
        "What is the capital of France?",
        "Which of the following estimation techniques are available for over-identified "
        "systems? (A) (iii) only (B) (i), (iii) and (iv) only",
        "Is the OLS estimator unbiased under heteroskedasticity?",
        "Explain the Stirling approximation to n!.",
        "I make two cuts through AC and BD of a regular pentagon. How many pieces are there "
        "after the cuts?",
        "Of the resulting pieces, how many triangles are there?",
        "Which planet is closest to the Sun? (A) Mercury (B) Venus (C) Mars",
        "Express your answer correct to the nearest tenth of a meter. (A) 225.0 m (B) 198.7 m",
        "Write a Python function that returns the n-th Fibonacci number.",
        "Solve for x: 2x + 3 = 7.",
    ],
)
def test_ballpark_negatives(prompt):
    assert not is_ballpark_question(prompt)


# ---------------------------------------------------------------- official score


def judgebench_pair_outcome(label: str, decision1: str | None, decision2: str | None) -> int:
    """The oracle: JudgeBench's own rule (``utils/metrics.py compute_final_metrics``) in its
    A>B / B>A frame, decision 2 given in the swapped order's frame and flipped back."""
    flip = {"A>B": "B>A", "B>A": "A>B"}
    if label not in flip:
        raise ValueError(f"label must be 'A>B' or 'B>A', got {label!r}")
    back = flip.get(decision2, decision2) if decision2 is not None else None
    counter = sum((d == label) - (d == flip[label]) for d in (decision1, back))
    return (counter > 0) - (counter < 0)


@pytest.mark.parametrize(
    ("label", "d1", "d2_swapped", "expected"),
    [
        ("A>B", "A>B", "B>A", 1),  # consistent and right
        ("A>B", "A>B", "A=B", 1),  # right once, tie once
        ("A>B", "A>B", None, 1),  # right once, no decision once
        ("A>B", None, "B>A", 1),
        ("A>B", "A>B", "A>B", 0),  # inconsistent: position-driven
        ("A>B", "A=B", "A=B", 0),  # double tie
        ("A>B", None, None, 0),
        ("A>B", "B>A", "A=B", -1),
        ("A>B", "B>A", "A>B", -1),  # consistent and wrong
        ("B>A", "B>A", "A>B", 1),
        ("B>A", "A=B", "A>B", 1),
        ("B>A", "A>B", "B>A", -1),
    ],
)
def test_judgebench_pair_outcome(label, d1, d2_swapped, expected):
    assert judgebench_pair_outcome(label, d1, d2_swapped) == expected


def test_official_outcome_matches_judgebench_rule_in_id_space():
    to_id_order1 = {"A>B": "x", "B>A": "y", "A=B": TIE, None: None}
    to_id_order2 = {"A>B": "y", "B>A": "x", "A=B": TIE, None: None}
    raw = ["A>B", "B>A", "A=B", None]
    for label, d1, d2 in itertools.product(["A>B", "B>A"], raw, raw):
        gold, other = ("x", "y") if label == "A>B" else ("y", "x")
        assert official_outcome(gold, other, to_id_order1[d1], to_id_order2[d2]) == (
            judgebench_pair_outcome(label, d1, d2)
        )


def test_official_rejects_bad_input():
    with pytest.raises(ValueError, match="label"):
        judgebench_pair_outcome("A=B", "A>B", "B>A")
    with pytest.raises(ValueError, match="differ"):
        official_outcome("x", "x", "x", "x")


def test_bucket_scores_by_hand():
    outcomes = [1, 1, 0, -1, 1, 0, 1]
    buckets = ["math", "mmlu-pro", "mmlu-pro", "mmlu-pro", "livecodebench", "math", "math"]
    scores = bucket_scores(outcomes, buckets)
    assert list(scores["buckets"]) == ["mmlu-pro", "livecodebench", "math"]
    assert scores["buckets"]["mmlu-pro"] == {
        "score": pytest.approx(100 / 3),
        "n": 3,
        "correct": 1,
        "incorrect": 1,
        "tie": 1,
    }
    assert scores["buckets"]["livecodebench"]["score"] == 100
    assert scores["buckets"]["math"]["score"] == pytest.approx(200 / 3)
    assert scores["overall"]["score"] == pytest.approx(400 / 7)
    assert (scores["overall"]["correct"], scores["overall"]["incorrect"]) == (4, 1)
    assert scores["macro"] == pytest.approx((100 / 3 + 100 + 200 / 3) / 3)


def test_bucket_scores_rejects_bad_input():
    with pytest.raises(ValueError, match="buckets"):
        bucket_scores([1, 0], ["x"])
    with pytest.raises(ValueError, match="no pairs"):
        bucket_scores([], [])
    with pytest.raises(ValueError, match="-1, 0 or 1"):
        bucket_scores([2], ["x"])
