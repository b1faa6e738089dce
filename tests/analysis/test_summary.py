"""The Overview's summary in words, on made-up figures that break its easy cases."""

from __future__ import annotations

import pandas as pd

from pcf.analysis.summary import summary_in_words


def table(overrides: list[bool]) -> pd.DataFrame:
    return pd.DataFrame({"overrides_direct": overrides})


STATS = {
    "improved": 4,
    "regressed": 1,
    "n": 10,
    "direct_accuracy": 0.5,
    "method_accuracy": 0.8,
    "delta_points": 30.0,
}
TRIAGE = {
    "items": 10,
    "errors": 3,
    "orders": {"priority": {"caught_at": {"10%": 0.3333, "20%": 0.6667}}},
    "random": {"caught_at": {"20%": 0.2}},
}


def test_the_summary_counts_changes_better_worse_and_where_to_look():
    # 6 verdicts changed, only 5 of them decided for better or worse: a change between two
    # wrong answers is a change, neither better nor worse
    sentences = summary_in_words(table([True] * 6 + [False] * 4), STATS, "gold labels", TRIAGE)
    assert sentences == [
        "The consensus over the orderings changed **6 of 10** verdicts of the judge's first "
        "reading: **4 better, 1 worse** against gold labels.",
        "Accuracy against gold labels (10 items): 50% for the first reading, 80% for the "
        "consensus (+30.0 points).",
        "Review the **2 most doubtful items first**: they hold **67% of the judge's 3 errors** "
        "(a random 2 hold about 20%).",
    ]


def test_without_labels_or_errors_the_summary_claims_nothing():
    no_errors = TRIAGE | {"errors": 0}
    sentences = summary_in_words(table([True, False, False]), None, "", no_errors)
    assert sentences == [
        "The consensus over the orderings changed **1 of 3** verdicts of the judge's first "
        "reading; no item has a gold or human label yet to say which verdict is right."
    ]
    assert summary_in_words(table([False]), None, "", None)[0].startswith(
        "The consensus over the orderings changed **0 of 1**"
    )
