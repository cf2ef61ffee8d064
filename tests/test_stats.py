"""`mha_lib.stats`: the Wilson interval of a frequency and the t quantiles of a mean over seeds."""

import itertools
import math

import pytest

from mha_lib.stats import T975, wilson_interval


def test_wilson_interval_is_symmetric_and_inside_0_1():
    for n in (1, 7, 20, 50):
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0
            lo2, hi2 = wilson_interval(n - k, n)
            assert lo == pytest.approx(1 - hi2) and hi == pytest.approx(1 - lo2)


def test_wilson_interval_rejects_impossible_counts():
    for bad in ((3, 2), (-1, 5), (0, 0)):
        with pytest.raises(ValueError, match="0 <= k <= n"):
            wilson_interval(*bad)


def test_t_quantiles_fall_towards_the_normal_one():
    values = [T975[df] for df in sorted(T975)]
    assert sorted(T975) == list(range(1, 10))
    assert all(a > b for a, b in itertools.pairwise(values)) and values[-1] > 1.96
    # df = 1 is the Cauchy distribution: its 97.5 % quantile is tan(0.475 π)
    assert T975[1] == pytest.approx(math.tan(0.475 * math.pi), abs=1e-3)
    # df = 2 has a closed form: t = q / sqrt((1 - q²) / 2) with q = 2 · 0.975 - 1
    q = 2 * 0.975 - 1
    assert T975[2] == pytest.approx(q / math.sqrt((1 - q * q) / 2), abs=1e-3)
