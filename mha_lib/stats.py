"""The intervals the series states its measured claims with, shared by every part.

- `wilson_interval(k, n)`: a frequency k of n (roles credited on held-out pairs in notebook 05,
  claims that hold in k of n seeds in notebooks 06, 10 and 11): where the rate lies, and so how
  likely the next seed is to do the same;
- `t_interval(values)`: the 95 % interval of a mean over s seeds, mean ± t · sd / √s, with t
  Student's quantile for s - 1 degrees of freedom (`t_quantile`), exact for any s >= 2
  (notebooks 06, 10 and 11): where the average over all seeds lies, not where one seed lands;
- `prediction_interval(values)`: where ONE new seed's value lands, 95 % of the time, mean ± t ·
  sd · √(1 + 1/s): √(s + 1) times wider than the mean's interval (notebooks 06, 10 and 11). It
  assumes the seeds' values are roughly normal; a quantity that splits between solved and
  unsolved runs is better stated as a count ("k of n");
- `bootstrap_interval(units, statistic)`: the percentile bootstrap interval of any statistic of
  a sample of units (texts, paragraphs, sequences), for a statistic that is not a mean of
  independent values, such as a count of heads measured on the same texts (notebook 13).

Plain Python and numpy; no scipy.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import check_int

__all__ = [
    "bootstrap_interval",
    "prediction_interval",
    "t_interval",
    "t_quantile",
    "wilson_interval",
]


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95 % for z = 1.96) of a frequency k / n.

    Unlike k/n ± z·sqrt(p(1-p)/n) it stays inside [0, 1] and does not shrink to a point when k
    is 0 or n: 50 of 50 seeds gives (0.93, 1.0), not "always".
    """
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"expected 0 <= k <= n and n >= 1; got k = {k}, n = {n}")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction
    (evaluated with the modified Lentz method; converges fast for x < (a + 1) / (a + b + 2),
    and the symmetry I_x(a, b) = 1 - I_(1-x)(b, a) covers the rest)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(1.0 - x, b, a)
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even step
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),  # the odd step
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * f / a


def _t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / (df + t * t), df / 2, 0.5)  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df > 0 degrees of freedom: t_quantile(0.975, 4) is
    2.776, the factor of a 95 % interval over 5 seeds. Found by bisection on the CDF, to about
    1e-12; no table, so any number of seeds has its exact factor."""
    if not 0 < p < 1:
        raise ValueError(f"p = {p!r}; expected a probability strictly between 0 and 1")
    if isinstance(df, bool) or not isinstance(df, (int, float, np.integer)) or not df > 0:
        raise ValueError(f"df = {df!r}; expected a number of degrees of freedom > 0")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def _seeds_along(values, axis: int, level: float, what: str) -> tuple[np.ndarray, int]:
    """values as float64 with s >= 2 entries along axis, and s; a clear error otherwise."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 0:
        raise ValueError("values is a single number; expected one value per seed along axis")
    s = x.shape[axis]
    if s < 2:
        raise ValueError(
            f"values has {s} entry along axis {axis} (shape {x.shape}); {what} needs at least "
            "2 seeds"
        )
    if not 0 < level < 1:
        raise ValueError(f"level = {level!r}; expected a probability such as 0.95")
    return x, s


def prediction_interval(
    values, axis: int = 0, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, half-width) of the `level` prediction interval for ONE new value drawn like the s
    values along `axis` (a seed the sweep did not run): mean ± t · sd · √(1 + 1/s), with sd and
    t as in `t_interval`. Needs s >= 2.

    The new value's difference from the sample mean has the variance of one seed (sd²) plus
    that of the mean (sd²/s), hence √(1 + 1/s); the half-width is √(s + 1) times the mean
    interval's (3.3 times at 10 seeds). Exact for normally distributed values, not clipped to
    any range."""
    x, s = _seeds_along(values, axis, level, "a prediction interval")
    t = t_quantile((1 + level) / 2, s - 1)
    return x.mean(axis), t * x.std(axis, ddof=1) * math.sqrt(1 + 1 / s)


def t_interval(values, axis: int = 0, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(mean, half-width) of the `level` interval of the mean of `values` along `axis`:
    mean ± t · sd / √s, s the number of values (seeds) along axis, sd their sample standard
    deviation (ddof = 1), t = t_quantile((1 + level) / 2, s - 1). Needs s >= 2.

    It covers the mean over all seeds; one new seed lands outside it far more often than
    1 - level (see `prediction_interval`)."""
    x, s = _seeds_along(values, axis, level, "an interval of a mean")
    t = t_quantile((1 + level) / 2, s - 1)
    return x.mean(axis), t * x.std(axis, ddof=1) / math.sqrt(s)


def bootstrap_interval(
    units, statistic=np.mean, resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(estimate, low, high): statistic(units) and its percentile bootstrap interval.

    units: an array whose first axis is the unit that varies (one text, paragraph or sequence
    each); statistic: a function of such an array (the units along axis 0) returning a number.
    The interval: draw `resamples` samples of as many units with replacement (a generator seeded
    with `seed`, so the same units give the same interval), compute the statistic on each, and
    take the (1 - level) / 2 and (1 + level) / 2 quantiles of those values. It asks only that
    the units be drawn independently from the population the claim is about; with few units
    (under 10 or so) it is too narrow, and the text should say how many there were.
    """
    x = np.asarray(units)
    if x.ndim == 0 or x.shape[0] < 2:
        raise ValueError(
            f"units has shape {x.shape}; expected at least 2 units along axis 0 (one per text, "
            "paragraph or sequence)"
        )
    if not 0 < level < 1:
        raise ValueError(f"level = {level!r}; expected a probability such as 0.95")
    check_int(resamples, "resamples", 100)
    n = x.shape[0]
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # (resamples, n)
    values = np.array([float(statistic(x[idx])) for idx in draws])  # (resamples,)
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(statistic(x)), float(low), float(high)
