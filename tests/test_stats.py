"""`mha_lib.stats`: the Wilson interval of a frequency, the t interval of a mean over seeds, the
prediction interval for one new seed and the bootstrap interval of a statistic of units."""

import itertools
import math

import numpy as np
import pytest

from mha_lib.stats import (
    bootstrap_interval,
    prediction_interval,
    t_interval,
    t_quantile,
    wilson_interval,
)


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


# 97.5 % quantiles of Student's t from published tables (6 decimals), by degrees of freedom
PUBLISHED = {
    1: 12.706205,
    2: 4.302653,
    3: 3.182446,
    4: 2.776445,
    5: 2.570582,
    9: 2.262157,
    10: 2.228139,
    11: 2.200985,
    20: 2.085963,
    30: 2.042272,
    49: 2.009575,
    100: 1.983972,
}


def test_t_quantile_matches_the_published_table():
    for df, value in PUBLISHED.items():
        assert t_quantile(0.975, df) == pytest.approx(value, abs=2e-6), df


def test_t_quantile_closed_forms():
    for p in (0.6, 0.9, 0.975, 0.995):
        # df = 1 is the Cauchy distribution: tan(π (p - 1/2))
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
        # df = 2: (2p - 1) / sqrt(2 p (1 - p))
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9)
        assert t_quantile(1 - p, 7) == pytest.approx(-t_quantile(p, 7), rel=1e-12)


def test_t_quantiles_fall_towards_the_normal_one():
    values = [t_quantile(0.975, df) for df in range(1, 200)]
    assert all(a > b for a, b in itertools.pairwise(values))
    assert values[-1] > 1.959964 and t_quantile(0.975, 1e6) == pytest.approx(1.959964, abs=1e-5)


def test_t_interval_of_a_mean():
    x = np.array([[0.5, 1.0], [0.7, 1.0], [0.9, 1.0], [0.6, 1.0]])  # 4 seeds, 2 settings
    mean, half = t_interval(x)
    assert mean.tolist() == pytest.approx([0.675, 1.0])
    sd = float(np.std(x[:, 0], ddof=1))
    assert half.tolist() == pytest.approx([3.182446 * sd / 2, 0.0], abs=1e-6)
    mean, half = t_interval(x.T, axis=1, level=0.9)  # the same seeds along another axis
    assert half[0] == pytest.approx(t_quantile(0.95, 3) * sd / 2)


def test_t_interval_covers_any_number_of_seeds():
    """No table to run off the end of, and no silent fallback to the normal 1.96."""
    rng = np.random.default_rng(0)
    for s in (2, 11, 12, 50, 101):
        x = rng.normal(size=s)
        _, half = t_interval(x)
        factor = half / (np.std(x, ddof=1) / math.sqrt(s))
        assert factor == pytest.approx(PUBLISHED.get(s - 1, t_quantile(0.975, s - 1)), abs=2e-6)
        assert factor > 1.96


def test_t_interval_rejects_what_has_no_interval():
    with pytest.raises(ValueError, match="at least 2 seeds"):
        t_interval([0.3])
    with pytest.raises(ValueError, match="single number"):
        t_interval(0.3)
    with pytest.raises(ValueError, match="level"):
        t_interval([0.3, 0.4], level=95)
    with pytest.raises(ValueError, match="df"):
        t_quantile(0.975, 0)
    with pytest.raises(ValueError, match="p = 1"):
        t_quantile(1, 3)


# prediction intervals worked by hand from the published 97.5 % t quantiles above:
# half-width = t(s - 1) * sd * sqrt(1 + 1/s)
BY_HAND = [
    # 2 seeds: mean 0.3, sd = 0.1 * sqrt(2) = 0.141421, t(1) = 12.706205, sqrt(1.5) = 1.224745
    ([0.2, 0.4], 0.3, 2.200779),
    # 5 seeds: mean 3, sd = sqrt(2.5) = 1.581139, t(4) = 2.776445, sqrt(1.2) = 1.095445
    ([1.0, 2.0, 3.0, 4.0, 5.0], 3.0, 4.808944),
    # 10 seeds: mean 0.699, sd = 0.116280, t(9) = 2.262157, sqrt(1.1) = 1.048809
    ([0.61, 0.74, 0.58, 0.93, 0.66, 0.70, 0.81, 0.55, 0.77, 0.64], 0.699, 0.275883),
]


def test_prediction_interval_matches_values_worked_by_hand():
    for values, mean, half in BY_HAND:
        m, h = prediction_interval(values)
        assert m == pytest.approx(mean, abs=1e-12) and h == pytest.approx(half, abs=2e-6)
    # the same along another axis, at another level (t(9) at 0.95 from the table: 1.833113)
    m, h = prediction_interval(np.array(BY_HAND[2][0])[None], axis=1, level=0.9)
    assert h[0] == pytest.approx(1.833113 * 0.116280 * 1.048809, abs=1e-5)


def test_a_new_draw_falls_in_the_prediction_interval_95_percent_of_the_time():
    """Monte Carlo, fixed seed: s normal values, then one more from the same distribution. The
    prediction interval of the s holds the new one in 95 % of 40 000 trials (exact for normal
    data; 4 standard errors of margin); the mean's t-interval holds it far less often, as
    P(|T_{s-1}| < t / sqrt(s + 1)) says (0.49 at 10 seeds: t(9) / sqrt(11) = 0.682, and a t
    table with 9 degrees of freedom puts 0.744 below 0.682)."""
    rng = np.random.default_rng(0)
    trials = 40_000
    margin = 4 * math.sqrt(0.95 * 0.05 / trials)  # 0.0044
    for s in (2, 3, 5, 10, 30):
        x = rng.normal(loc=0.7, scale=0.2, size=(trials, s + 1))
        seen, new = x[:, :s], x[:, s]
        mean, half = prediction_interval(seen, axis=1)
        covered = float(np.mean(np.abs(new - mean) <= half))
        assert abs(covered - 0.95) < margin, (s, covered)
        mean, half = t_interval(seen, axis=1)
        by_mean_interval = float(np.mean(np.abs(new - mean) <= half))
        assert by_mean_interval < 0.95 - margin, (s, by_mean_interval)
        if s == 10:
            assert abs(by_mean_interval - 0.49) < 0.02, by_mean_interval


def test_the_prediction_interval_is_sqrt_s_plus_1_times_the_mean_interval():
    x = np.random.default_rng(1).normal(size=(10, 3))  # 10 seeds, 3 quantities
    (m1, h1), (m2, h2) = t_interval(x), prediction_interval(x)
    assert m1.tolist() == m2.tolist()
    assert (h2 / h1).tolist() == pytest.approx([math.sqrt(11)] * 3, rel=1e-12)  # 3.3 at 10 seeds


def test_prediction_interval_rejects_what_has_no_interval():
    with pytest.raises(ValueError, match="a prediction interval needs at least 2 seeds"):
        prediction_interval([0.3])
    with pytest.raises(ValueError, match=r"shape \(3, 1\)"):
        prediction_interval(np.zeros((3, 1)), axis=1)
    with pytest.raises(ValueError, match="single number"):
        prediction_interval(0.3)
    for level in (95, 0.0, 1.0, -0.5):
        with pytest.raises(ValueError, match="level"):
            prediction_interval([0.3, 0.4], level=level)


# ------------------------------------------------------------------------------ bootstrap


def _exact_bootstrap(units, statistic):
    """Every one of the n^n equally likely resamples of n units: the bootstrap distribution
    itself, which the sampled interval estimates."""
    n = len(units)
    return np.array([statistic(units[list(idx)]) for idx in itertools.product(range(n), repeat=n)])


def test_bootstrap_interval_matches_the_exact_bootstrap_distribution():
    """Against the reference: for 5 units the 3,125 resamples can be enumerated; the sampled
    quantiles of 20,000 draws fall within 0.05 (on values of order 1) of the exact ones, for the
    mean and for a statistic that is not a mean (a count above a threshold)."""
    units = np.array([0.1, 0.4, 0.45, 0.9, 1.7])
    for statistic in (np.mean, lambda u: float((u > 0.42).sum())):
        exact = np.quantile(_exact_bootstrap(units, statistic), [0.025, 0.975])
        est, low, high = bootstrap_interval(units, statistic, resamples=20_000, seed=1)
        assert est == pytest.approx(statistic(units))
        assert abs(low - exact[0]) < 0.05 and abs(high - exact[1]) < 0.05, (low, high, exact)


def test_bootstrap_interval_of_a_mean_is_about_the_normal_one():
    """For a large sample the percentile interval of the mean is about mean ± 1.96 · sd / √n."""
    x = np.random.default_rng(0).normal(size=400)
    mean, low, high = bootstrap_interval(x, resamples=4000)
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))
    assert abs((high - low) / 2 - half) < 0.1 * half and abs((low + high) / 2 - mean) < 0.1 * half


def test_bootstrap_interval_is_seeded_and_takes_units_along_axis_0():
    units = np.arange(12.0).reshape(6, 2)  # 6 units of 2 values each
    first = bootstrap_interval(units, lambda u: u[:, 1].mean() - u[:, 0].mean())
    assert first == bootstrap_interval(units, lambda u: u[:, 1].mean() - u[:, 0].mean())
    assert first == pytest.approx((1.0, 1.0, 1.0))  # every unit the same difference: no spread
    assert bootstrap_interval([3.0, 3.0, 3.0]) == (3.0, 3.0, 3.0)
    x = np.random.default_rng(3).normal(size=8)
    assert bootstrap_interval(x, seed=1) != bootstrap_interval(x, seed=2)


def test_bootstrap_interval_rejects_what_has_no_interval():
    with pytest.raises(ValueError, match="at least 2 units"):
        bootstrap_interval([0.3])
    with pytest.raises(ValueError, match="at least 2 units"):
        bootstrap_interval(0.3)
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval([0.3, 0.4], level=95)
    with pytest.raises(ValueError, match="resamples must be at least 100; got 10"):
        bootstrap_interval([0.3, 0.4], resamples=10)
    with pytest.raises(TypeError, match="resamples must be an int; got float"):
        bootstrap_interval([0.3, 0.4], resamples=1e3)
