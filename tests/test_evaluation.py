"""Evaluation statistics against hand-computed values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from pcf.evaluation import (
    accuracy,
    cohen_kappa,
    compare_paired,
    krippendorff_alpha,
    mcnemar_exact,
    paired_bootstrap_ci,
    paired_outcomes,
)


def test_accuracy_counts_abstentions_as_wrong():
    assert accuracy(["a", "b", None, "a"], ["a", "a", "b", "a"]) == 0.5
    assert accuracy(["x"], ["x"]) == 1.0
    with pytest.raises(ValueError, match="lengths differ"):
        accuracy(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="nothing"):
        accuracy([], [])


def test_paired_outcomes_by_hand():
    direct = [True, True, False, False, False, True]
    method = [True, False, True, True, False, True]
    assert paired_outcomes(direct, method) == {
        "improved": 2,
        "regressed": 1,
        "same": 3,
        "both_right": 2,
        "both_wrong": 1,
    }


@pytest.mark.parametrize(
    ("improved", "regressed", "expected"),
    [
        (10, 2, 2 * (1 + 12 + 66) / 2**12),  # 2 * P(X <= 2), X ~ Bin(12, 1/2)
        (5, 0, 2 / 2**5),
        (0, 5, 2 / 2**5),
        (4, 2, 2 * (1 + 6 + 15) / 2**6),
        (3, 3, 1.0),
        (0, 0, 1.0),
    ],
)
def test_mcnemar_exact_hand_values(improved, regressed, expected):
    assert mcnemar_exact(improved, regressed) == pytest.approx(expected)


def test_mcnemar_agrees_with_scipy_binomtest():
    for improved, regressed in itertools.product(range(13), repeat=2):
        if improved + regressed == 0:
            continue
        scipy_p = binomtest(min(improved, regressed), improved + regressed, 0.5).pvalue
        assert mcnemar_exact(improved, regressed) == pytest.approx(scipy_p)


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError, match="non-negative"):
        mcnemar_exact(-1, 2)


def test_bootstrap_degenerate_cases_by_hand():
    assert paired_bootstrap_ci([True, False] * 5, [True, False] * 5) == (0.0, 0.0)
    assert paired_bootstrap_ci([False] * 8, [True] * 8) == (1.0, 1.0)
    assert paired_bootstrap_ci([True] * 8, [False] * 8) == (-1.0, -1.0)


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(7)
    direct = rng.random(150) < 0.6
    method = np.where(rng.random(150) < 0.2, ~direct, direct)
    first = paired_bootstrap_ci(direct, method, seed=1)
    assert first == paired_bootstrap_ci(direct, method, seed=1)
    # Quantiles sit on a lattice of 1/n, so only few replicates show the seed at work.
    small = {paired_bootstrap_ci(direct, method, n_boot=40, seed=s) for s in range(5)}
    assert len(small) > 1
    estimate = method.mean() - direct.mean()
    assert first[0] <= estimate <= first[1]
    narrow = paired_bootstrap_ci(direct, method, seed=1, level=0.5)
    assert first[0] <= narrow[0] <= narrow[1] <= first[1]


def test_bootstrap_matches_resampling_item_indices():
    """The multinomial shortcut has the distribution of resampling items with replacement."""
    rng = np.random.default_rng(11)
    n = 120
    direct = rng.random(n) < 0.55
    method = np.where(rng.random(n) < 0.3, rng.random(n) < 0.7, direct)
    indices = np.random.default_rng(0).integers(0, n, size=(20000, n))
    naive = method[indices].mean(axis=1) - direct[indices].mean(axis=1)
    naive_ci = np.quantile(naive, [0.025, 0.975])
    low, high = paired_bootstrap_ci(direct, method, n_boot=20000, seed=3)
    assert low == pytest.approx(naive_ci[0], abs=0.01)
    assert high == pytest.approx(naive_ci[1], abs=0.01)


def test_bootstrap_rejects_bad_settings():
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap_ci([True], [True], n_boot=0)
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap_ci([True], [True], level=1.0)


def test_cohen_kappa_by_hand():
    # Table [[20, 5], [10, 15]]: po = 0.7, pe = (25*30 + 25*20) / 50**2 = 0.5, kappa = 0.4.
    a = ["x"] * 25 + ["y"] * 25
    b = ["x"] * 20 + ["y"] * 5 + ["x"] * 10 + ["y"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(["x", "y", "z"], ["x", "y", "z"]) == pytest.approx(1.0)


def test_cohen_kappa_drops_missing_and_flags_undefined():
    a = ["x"] * 25 + ["y"] * 25 + [None, "x"]
    b = ["x"] * 20 + ["y"] * 5 + ["x"] * 10 + ["y"] * 15 + ["y", None]
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert math.isnan(cohen_kappa(["x", "x"], ["x", "x"]))
    with pytest.raises(ValueError, match="both raters"):
        cohen_kappa([None], ["x"])


def test_krippendorff_alpha_by_hand():
    # Units (a,a), (a,b), (b,b), (b,b): n_a = 3, n_b = 5, n = 8, D_o = 2/8,
    # D_e = 2 * 3 * 5 / (8 * 7), alpha = 1 - D_o / D_e = 16/30.
    assert krippendorff_alpha([["a", "a", "b", "b"], ["a", "b", "b", "b"]]) == pytest.approx(
        16 / 30
    )


def test_krippendorff_alpha_with_missing_values():
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": nominal alpha 0.743.
    data = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    ]
    assert krippendorff_alpha(data) == pytest.approx(0.743, abs=5e-4)
    as_text = [[None if v is None else f"label-{v}" for v in row] for row in data]
    assert krippendorff_alpha(as_text) == pytest.approx(krippendorff_alpha(data))
    with pytest.raises(ValueError, match="same items"):
        krippendorff_alpha([[1, 2], [1]])


def test_compare_paired_by_hand():
    gold = ["a"] * 10
    # direct right on items 0-5 (item 6 abstains); method right on items 0-3 and 6-9.
    direct = ["a"] * 6 + [None] + ["b"] * 3
    method = ["a"] * 4 + ["b"] * 2 + ["a"] * 4
    result = compare_paired(gold, direct, method)
    assert result["n"] == 10
    assert result["direct_accuracy"] == 0.6
    assert result["method_accuracy"] == 0.8
    assert result["delta_points"] == pytest.approx(20.0)
    assert (result["improved"], result["regressed"], result["same"]) == (4, 2, 4)
    assert (result["both_right"], result["both_wrong"]) == (4, 0)
    assert (result["direct_abstentions"], result["method_abstentions"]) == (1, 0)
    assert result["mcnemar_p"] == pytest.approx(2 * (1 + 6 + 15) / 2**6)
    low, high = result["ci_points"]
    assert low <= 20.0 <= high
    assert result["ci_points"] == compare_paired(gold, direct, method)["ci_points"]


def test_compare_paired_requires_gold():
    with pytest.raises(ValueError, match="gold id"):
        compare_paired(["a", None], ["a", "b"], ["a", "b"])
