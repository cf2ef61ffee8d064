"""Checkers for notebook 00 (start here): the notation and the shapes.

- `check_shapes(fn)`: fn(C, h, d_k, d_v) -> a dict of the shapes of X and the weights;
- `check_parameter_count(fn)`: fn(C, h, d_k, d_v) -> the number of weights.

The cases include d_k != d_v and h*d_k != C, so "d_k = C / h" and "d_v = d_k"
shortcuts fail, and several sizes, so hard-coded numbers fail.
"""

from __future__ import annotations

import numbers

from ._base import checker, run

__all__ = ["check_parameter_count", "check_shapes"]

# (C, h, d_k, d_v): the paper's sizes, then d_k != d_v, then h*d_k != C and h*d_v != C.
_CASES = ((512, 8, 64, 64), (6, 2, 3, 2), (12, 3, 5, 2))


def _shapes(C: int, h: int, d_k: int, d_v: int) -> dict[str, tuple]:
    return {
        "X": ("N", C),
        "W_Q^h": (C, d_k),
        "W_K^h": (C, d_k),
        "W_V^h": (C, d_v),
        "W_O": (h * d_v, C),
    }


def _as_shape(value) -> tuple | None:
    """A shape given as a tuple, list or numpy shape, with plain ints; None if not one."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        items = tuple(value)
    except TypeError:
        return None
    return tuple(int(v) if isinstance(v, numbers.Integral) else v for v in items)


def _shape_mistakes(name: str, got, want: tuple, C: int, h: int, d_k: int, d_v: int):
    """What may be wrong with the shape `got` given for `name`: (key, message) pairs, the
    likeliest first; the last one only says what was expected."""
    sizes = f"C={C}, h={h}, d_k={d_k}, d_v={d_v}"
    found = []
    if got is None:
        return [
            ("none", f"{name} must be a shape such as (C, d_k), a tuple; for {sizes} it is {want}")
        ]
    if name == "X" and got == (C, "N"):
        found.append(("X.T", "X is transposed: it holds one row per token, (N, C)"))
    elif name == "X" and (len(got) != 2 or got[0] != "N"):
        found.append(
            ("X N", f'X is (N, C): use the string "N" for the number of tokens, ("N", {C})')
        )
    if got == want[::-1]:
        if name == "W_O":
            found.append(
                ("T", "W_O is transposed: it maps the concatenated heads (h*d_v) back to C")
            )
        else:
            found.append(
                ("T", f"{name} is transposed: X (N, C) is multiplied on the left, X @ {name}")
            )
    if name == "W_O" and got == (d_v, C):
        found.append(
            ("d_v rows", "W_O acts on the concatenation of all h heads, so it has h*d_v rows")
        )
    if name == "W_O" and got == (h * d_k, C) and d_k != d_v:
        found.append(
            ("h d_k", "W_O's rows are the concatenated VALUES of the h heads: h*d_v, not h*d_k")
        )
    if name == "W_V^h" and got == (C, d_k) and d_k != d_v:
        found.append(("V d_k", "W_V^h produces values, whose width is d_v, not d_k"))
    if name in ("W_Q^h", "W_K^h", "W_V^h") and got == (C, h * want[1]):
        found.append(
            (
                "all heads",
                f"{name} is ONE head's matrix, ({C}, {want[1]}); (C, h*d) holds all heads",
            )
        )
    if name == "W_O" and got == (C, C):
        found.append(
            (
                "C C",
                f"W_O is (h*d_v, C) = {want}; (C, C) holds only when h*d_v = C, and here "
                f"h*d_v = {h * d_v}",
            )
        )
    if name in ("W_Q^h", "W_K^h", "W_V^h") and got == (C, C):
        found.append(
            ("C C", f"{name} maps C = {C} features to one head's {want[1]}, not to C: {want}")
        )
    return found + [("expected", f"{name} for {sizes}: expected {want}; got {got}")]


def _shape_mistake(name: str, gots: list, wants: list, cases: list) -> str:
    """Name the mistake in the shapes given for `name` over the cases: the first one (in the
    first case that fails) that explains every failing case; ambiguous sizes in one case
    (h*d_k = C there) are settled by the others."""
    failing = [
        _shape_mistakes(name, got, want, *case)
        for got, want, case in zip(gots, wants, cases)
        if got != want
    ]
    keys = [{key for key, _ in candidates} for candidates in failing]
    for key, message in failing[0]:
        if all(key in k for k in keys):
            return message
    return failing[0][0][1]


def _text_problem(result: dict) -> str | None:
    """Name shapes written as text ("(C, d_k)") or as symbols (("C", "d_k")), or None."""
    for name, value in result.items():
        if name not in ("X", "W_Q^h", "W_K^h", "W_V^h", "W_O"):
            continue
        if isinstance(value, str):
            return (
                f"{name} is given as the text {value!r}: give a tuple of numbers computed from "
                'the arguments, such as (C, d_k) (only X\'s token count is the string "N")'
            )
        if isinstance(value, (tuple, list)):
            symbols = [v for v in value if isinstance(v, str) and not (name == "X" and v == "N")]
            if symbols:
                return (
                    f"{name} has the symbol {symbols[0]!r} as a string: use the number, the "
                    'argument of that name (only X\'s token count is the string "N")'
                )
    return None


def _missing_key(got: dict, name: str) -> str:
    """The message for a missing key, naming a key that differs only in case or in ^h."""

    def plain(key) -> str:
        return str(key).lower().replace("^h", "").replace("_", "").replace(" ", "")

    near = [key for key in got if plain(key) == plain(name)]
    keys = "keys: 'X', 'W_Q^h', 'W_K^h', 'W_V^h', 'W_O'"
    if near:
        return f"the dict has no key {name!r} but has {near[0]!r}: spell the keys exactly, {keys}"
    return f"the dict has no key {name!r}; {keys}"


@checker("shapes")
def check_shapes(fn):
    """Check fn(C, h, d_k, d_v) -> a dict of shapes.

    Expected keys: "X" (with the string "N" for the token count), "W_Q^h", "W_K^h",
    "W_V^h" and "W_O". Shapes may be tuples or lists, of ints or numpy ints.
    """
    answers = []
    for C, h, d_k, d_v in _CASES:
        result, problem = run(fn, C, h, d_k, d_v)
        if problem:
            return problem
        if not isinstance(result, dict):
            return f"expected a dict of shapes ('X', 'W_Q^h', ...); got {type(result).__name__}"
        answers.append({name: _as_shape(value) for name, value in result.items()})
        problem = _text_problem(result)
        if problem:
            return problem
    if all(a == answers[0] for a in answers):
        return "it returns the same shapes for every C, h, d_k, d_v: use the arguments"
    wants = [_shapes(*case) for case in _CASES]
    if answers != wants and all(
        a == w or a == _shapes(C, h, C // h, C // h)
        for a, w, (C, h, _, _) in zip(answers, wants, _CASES)
    ):
        return "it assumes d_k = d_v = C / h; here h*d_k != C: use the arguments d_k and d_v"
    for got, want in zip(answers, wants):
        for name in want:
            if name not in got:
                return _missing_key(got, name)
    for name in wants[0]:
        gots, want_name = [a[name] for a in answers], [w[name] for w in wants]
        if gots != want_name:
            return _shape_mistake(name, gots, want_name, list(_CASES))
    return None


def _count_mistakes(C: int, h: int, d_k: int, d_v: int) -> dict[str, int]:
    """The counts of the usual wrong formulas, keyed by what is wrong."""
    right = 2 * C * h * d_k + C * h * d_v + h * d_v * C
    return {
        "every head has its own W_Q^h, W_K^h, W_V^h: multiply those by h": (
            2 * C * d_k + C * d_v + h * d_v * C
        ),
        "you forgot the output projection W_O (h*d_v x C)": 2 * C * h * d_k + C * h * d_v,
        "W_O acts on all h heads at once: it has h*d_v rows, not d_v": right - (h - 1) * d_v * C,
        "it mixes up d_k and d_v: W_Q^h and W_K^h have d_k columns, W_V^h has d_v, and W_O "
        "has h*d_v rows": 3 * C * h * d_k + h * d_v * C,
        "it uses d_k for every matrix: W_V^h is (C, d_v) and W_O is (h*d_v, C)": (4 * C * h * d_k),
        "it counts only one of W_Q^h and W_K^h: both have C*d_k weights per head": (
            right - C * h * d_k
        ),
        "4C² holds only when d_k = d_v = C / h; count each matrix with the given d_k, d_v": (
            4 * C * C
        ),
        "W_O is (h*d_v, C), not (C, C): C*C holds only when h*d_v = C": (
            right - h * d_v * C + C * C
        ),
        "W_O is shared by the heads: count its h*d_v*C weights once, not once per head": (
            right + (h - 1) * h * d_v * C
        ),
        "no biases: count only the entries of the weight matrices": (
            right + h * (2 * d_k + d_v) + C
        ),
    }


def _as_count(result) -> float | None:
    """A learner's count as a number (int, numpy int, integral float, 0-d tensor)."""
    if isinstance(result, (bool, str)):
        return None
    try:
        return float(result)
    except (TypeError, ValueError):
        return None


def _shown(count: float) -> str:
    return str(int(count)) if count.is_integer() else str(count)


@checker("parameter count")
def check_parameter_count(fn):
    """Check fn(C, h, d_k, d_v) -> the number of weights of multi-head attention (no biases).

    Any number type is fine (int, numpy int, 1.0e6, a 0-d array or tensor).
    """
    counts = []
    for case in _CASES:
        result, problem = run(fn, *case)
        if problem:
            return problem
        counts.append(_as_count(result))
        if counts[-1] is None and isinstance(result, (tuple, list, dict)):
            return (
                f"it returns several numbers (a {type(result).__name__}): add them up into one "
                "count of weights"
            )
        if counts[-1] is None:
            return f"expected a number; got {type(result).__name__}"
    expected = [2 * C * h * d_k + C * h * d_v + h * d_v * C for C, h, d_k, d_v in _CASES]
    if counts == expected:
        return None
    if all(c == counts[0] for c in counts):
        return "it returns the same number for every C, h, d_k, d_v: use the arguments"
    mistakes = [_count_mistakes(*case) for case in _CASES]
    for message in mistakes[0]:  # a mistake is named when its formula fits every case
        if all(c == m[message] for c, m in zip(counts, mistakes)):
            return message
    i = next(i for i, (c, e) in enumerate(zip(counts, expected)) if c != e)
    C, h, d_k, d_v = _CASES[i]
    return (
        f"for C={C}, h={h}, d_k={d_k}, d_v={d_v}: expected {expected[i]}, got {_shown(counts[i])}"
    )
