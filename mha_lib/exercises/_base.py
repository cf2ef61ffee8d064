"""The machinery shared by every checker: run the learner's function safely,
compare with the reference, diagnose the usual mistakes, print one line."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def run(fn: Callable, *args):
    """Call fn(*args); return (result, None) or (None, message about what went wrong)."""
    try:
        result = fn(*args)
    except Exception as exc:  # a learner's error is feedback, not a crash
        return None, f"your function raised {type(exc).__name__}: {exc}"
    if result is None or result is Ellipsis:
        return None, "your function returned None: it is not implemented yet"
    return result, None


def as_array(result, expected_shape: tuple[int, ...]):
    """Convert a learner's result to an array of the expected shape, or explain why not."""
    try:
        arr = np.asarray(result, dtype=float)
    except (TypeError, ValueError):
        return None, f"expected an array of shape {expected_shape}; got {type(result).__name__}"
    if arr.shape != expected_shape:
        return None, f"expected shape {expected_shape}; got {arr.shape}"
    return arr, None


def close(a, b, tol: float = 1e-6) -> bool:
    """True when two arrays have the same shape and agree to `tol`."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol))


def diagnose(result, wrong_answers: dict[str, np.ndarray]) -> str | None:
    """Name the first known mistake whose output equals `result`, if any."""
    for message, wrong in wrong_answers.items():
        if close(result, wrong):
            return message
    return None


def report(name: str, problem: str | None) -> bool:
    """Print the one-line verdict and return whether the answer passed."""
    if problem is None:
        print(f"✓ {name}: correct")
        return True
    print(f"✗ {name}: {problem}")
    return False
