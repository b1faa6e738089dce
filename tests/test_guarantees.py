"""Fixed-sequence testing with exact binomial bounds (pcf/guarantees.py)."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from pcf.guarantees import fixed_sequence, random_sample, smallest_sample, upper_bound


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
