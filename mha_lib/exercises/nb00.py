"""Checkers for notebook 00 (start here): the notation and the shapes."""

from __future__ import annotations

from ._base import report, run

__all__ = ["check_parameter_count", "check_shapes"]

_CASES = [(512, 8, 64, 64), (6, 2, 3, 3), (12, 3, 5, 2)]  # (C, h, d_k, d_v)


def _shapes(C: int, h: int, d_k: int, d_v: int) -> dict[str, tuple[int, int]]:
    return {
        "X": ("N", C),
        "W_Q^h": (C, d_k),
        "W_K^h": (C, d_k),
        "W_V^h": (C, d_v),
        "W_O": (h * d_v, C),
    }


def check_shapes(fn) -> bool:
    """Check fn(C, h, d_k, d_v) -> a dict of shapes.

    Expected keys: "X" (with the string "N" for the token count), "W_Q^h", "W_K^h",
    "W_V^h" and "W_O".
    """
    problem = None
    for C, h, d_k, d_v in _CASES:
        result, problem = run(fn, C, h, d_k, d_v)
        if problem:
            break
        if not isinstance(result, dict):
            problem = f"expected a dict of shapes; got {type(result).__name__}"
            break
        expected = _shapes(C, h, d_k, d_v)
        for name, shape in expected.items():
            got = tuple(result.get(name, ())) if result.get(name) is not None else None
            if got == shape:
                continue
            if name == "W_O" and got == (C, h * d_v):
                problem = "W_O is transposed: it maps the concatenated heads (h*d_v) back to C"
            elif name == "W_O" and got == (d_v, C):
                problem = "W_O acts on the concatenation of all h heads, so it has h*d_v rows"
            elif name in ("W_Q^h", "W_K^h", "W_V^h") and got is not None and got[::-1] == shape:
                problem = f"{name} is transposed: X (N, C) is multiplied on the left, X @ {name}"
            elif name == "W_V^h" and got == (C, d_k) and d_k != d_v:
                problem = "W_V^h produces values, whose width is d_v, not d_k"
            else:
                problem = (
                    f"{name} for C={C}, h={h}, d_k={d_k}, d_v={d_v}: expected {shape}; got {got}"
                )
            break
        if problem:
            break
    return report("shapes", problem)


def check_parameter_count(fn) -> bool:
    """Check fn(C, h, d_k, d_v) -> the number of weights of multi-head attention (no biases)."""
    problem = None
    for C, h, d_k, d_v in _CASES:
        result, problem = run(fn, C, h, d_k, d_v)
        if problem:
            break
        expected = 2 * C * h * d_k + C * h * d_v + h * d_v * C
        if result == expected:
            continue
        if result == 2 * C * d_k + C * d_v + h * d_v * C:
            problem = "every head has its own W_Q^h, W_K^h, W_V^h: multiply those by h"
        elif result == 2 * C * h * d_k + C * h * d_v:
            problem = "you forgot the output projection W_O (h*d_v x C)"
        elif result == 3 * C * h * d_k + h * d_v * C and d_k != d_v:
            problem = "W_V^h has d_v columns, not d_k"
        else:
            problem = f"for C={C}, h={h}, d_k={d_k}, d_v={d_v}: expected {expected}, got {result}"
        break
    return report("parameter count", problem)
