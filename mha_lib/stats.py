"""The two intervals the series states its measured claims with, shared by every part.

- `wilson_interval(k, n)`: a frequency k of n (roles credited on held-out pairs in notebook 05,
  claims that hold in k of n seeds in notebook 06);
- `T975`: Student's t quantiles for the 95 % interval of a mean over a few seeds,
  mean ± T975[s - 1] · sd / √s (notebooks 10 and 11).

Plain Python: no numpy, no torch.
"""

from __future__ import annotations

import math

__all__ = ["T975", "wilson_interval"]

# 97.5 % quantiles of Student's t, by degrees of freedom (s - 1 for s seeds)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


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
