"""Checkers for notebook 01 (self-attention without weights)."""

from __future__ import annotations

import numpy as np

from ..attention import softmax
from ._base import as_array, close, diagnose, report, run

__all__ = ["check_softmax"]


def check_softmax(fn) -> bool:
    """Check a learner's softmax(x) that normalises over the last axis."""
    name = "softmax"
    x = np.array([[1.0, 2.0, 3.0], [2.0, -1.0, 0.5]])  # (2, 3)
    result, problem = run(fn, x.copy())
    if problem is None:
        result, problem = as_array(result, x.shape)
    if problem is None and not close(result, softmax(x)):
        e = np.exp(x)
        problem = diagnose(
            result,
            {
                "it normalises over the wrong axis: each ROW must sum to 1 (use axis=-1)": e
                / e.sum(axis=0, keepdims=True),
                "it divides by the sum of the whole matrix, not of each row": e / e.sum(),
                "it returns exp(x) without dividing by the row sum": e,
                "it divides x by its row sum without exponentiating": x
                / x.sum(axis=-1, keepdims=True),
            },
        ) or ("wrong values: expected softmax(x) with rows summing to 1")
    if problem is None:
        big = np.array([[1e4, 0.0, -1e4]], dtype=np.float32)  # (1, 3)
        with np.errstate(all="ignore"):
            result, problem = run(fn, big.copy())
        if problem is None:
            result, problem = as_array(result, big.shape)
        if problem is None and not np.all(np.isfinite(result)):
            problem = (
                "it overflows for large logits (1e4 gives inf/NaN): subtract each row's "
                "maximum before exp"
            )
        elif problem is None and not close(result, [[1.0, 0.0, 0.0]]):
            problem = "wrong values for large logits: expected [1, 0, 0]"
    return report(name, problem)
