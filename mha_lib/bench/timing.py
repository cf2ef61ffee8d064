"""Timing shared by every benchmark: interleaved repeats, medians.

Speed is reported as ratios measured within one run: the variants are timed
in interleaved rounds (A B A B ...) so that a slow moment of the machine hits
all of them alike, and each is summarised by its median. Notebooks 03 and 04
use the same helper for their small live timings.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time in seconds of each callable, timed in interleaved rounds."""
    for fn in fns.values():  # warm-up: first-touch allocations, BLAS threads
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}
