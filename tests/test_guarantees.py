"""Fixed-sequence testing with exact binomial bounds (pcf/guarantees.py)."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binomtest

from pcf.guarantees import (
    fixed_sequence,
    random_sample,
    rest_upper_bound,
    smallest_sample,
    upper_bound,
)


@pytest.mark.parametrize(("errors", "n", "delta"), [(0, 30, 0.1), (3, 40, 0.05), (17, 200, 0.1)])
def test_the_upper_bound_is_clopper_pearsons(errors, n, delta):
    interval = binomtest(errors, n).proportion_ci(confidence_level=1 - 2 * delta, method="exact")
    assert upper_bound(errors, n, delta) == pytest.approx(interval.high)
    assert upper_bound(n, n, delta) == upper_bound(0, 0, delta) == 1.0


@pytest.mark.parametrize(("level", "delta"), [(0.05, 0.1), (0.2, 0.1), (0.01, 0.05)])
def test_the_smallest_sample_is_the_first_that_can_pass(level, delta):
    size = smallest_sample(level, delta)
    assert fixed_sequence([(0, size)], level, delta) == 1
    assert fixed_sequence([(0, size - 1)], level, delta) == 0


def test_testing_stops_at_the_first_failure():
    tests = [(0, 100), (5, 100), (30, 100), (0, 100)]  # the last would pass alone
    assert fixed_sequence(tests, 0.1, 0.1) == 2


def test_a_random_sample_is_seeded_and_of_its_size():
    keys = [f"item-{i}" for i in range(50)]
    assert random_sample(keys, 10, 3) == random_sample(list(reversed(keys)), 10, 3)
    assert len(random_sample(keys, 10, 3)) == 10
    assert random_sample(keys, 10, 3) != random_sample(keys, 10, 4)
    assert random_sample(keys, 80, 3) == set(keys)


def hypergeometric_cdf(errors: int, population: int, total: int, sample: int) -> float:
    """P(at most ``errors`` of ``total`` in a ``sample`` of ``population``), by hand."""
    ways = math.comb(population, sample)
    return (
        sum(
            math.comb(total, k) * math.comb(population - total, sample - k)
            for k in range(errors + 1)
        )
        / ways
    )


@pytest.mark.parametrize(
    ("errors", "sample", "population", "delta"),
    [(0, 50, 200, 0.1), (3, 45, 200, 0.1), (2, 9, 30, 0.05)],
)
def test_the_bound_on_the_other_items_is_the_hypergeometric_one(errors, sample, population, delta):
    rest = population - sample
    bound = rest_upper_bound(errors, sample, population, delta)
    largest = round(bound * rest) + errors  # the largest total not ruled out at delta
    assert hypergeometric_cdf(errors, population, largest, sample) > delta
    if largest < errors + rest:
        assert hypergeometric_cdf(errors, population, largest + 1, sample) <= delta
    assert rest_upper_bound(errors, population, population, delta) == 0.0


def test_a_finite_set_needs_a_larger_sample_for_its_other_items():
    """200 items at 5%: 45 calibration items bound a new item's risk, but 0 errors in them leave
    8 of the 155 others possible (5.2%: none of 8 falls in the sample with chance 0.125 >
    delta, the issue's worst case); 50 are enough."""
    assert smallest_sample(0.05, 0.1) == 45
    assert smallest_sample(0.05, 0.1, 200) == 50
    assert fixed_sequence([(0, 45)], 0.05, 0.1, population=200) == 0
    assert fixed_sequence([(0, 50)], 0.05, 0.1, population=200) == 1
    assert smallest_sample(0.05, 0.1, 10) == 9  # a tenth left: none of it in error
