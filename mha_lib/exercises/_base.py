"""The machinery shared by every checker: call the learner's function safely,
read its answer, compare it with the reference, name the usual mistakes, print
one line.

One rule for answers, in every checker: the values are judged, not the
container. A numpy array, a nested list, or a torch tensor (on any device, with
`requires_grad=True`, or an `nn.Parameter`) are all read the same way, with
`to_numpy`. Where an exercise asks for a torch tensor (notebook 04) and gets a
numpy array, the answer passes with a note saying how to make it a tensor.

The arguments are of one kind, the one the exercise says it gives. Where a notebook's own data
are torch tensors (a model's weights and logits, notebooks 12 and 13), `run_as` passes tensors,
and an answer written for numpy arrays only is run again on numpy arrays: judged there, and if
right it passes with a note saying how to call it on the notebook's tensors (and the reverse for
exercises that give numpy arrays).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import numpy as np


class Note(str):
    """A checker's verdict "correct", with a remark to print after it."""


# The start of every message that says something is wrong without naming a mistake
# (the first three may come from sizes read from the wrong place).
GENERIC = ("your function raised", "wrong values", "expected shape", "expected an array")


def checker(name: str):
    """Turn `body(fn) -> problem` (None, a Note, or a message) into `check(fn) -> bool`.

    The check prints exactly one line and never raises: if reading a strange
    answer makes the body itself fail, that failure becomes the message.
    """

    def wrap(body: Callable) -> Callable:
        @functools.wraps(body)
        def check(fn) -> bool:
            try:
                problem = body(fn)
            except Exception as exc:  # an answer the checker could not read
                problem = f"could not check the answer ({type(exc).__name__}: {exc})"
            return report(name, problem)

        return check

    return wrap


def report(name: str, problem: str | None) -> bool:
    """Print the one-line verdict and return whether the answer passed."""
    if problem is None or isinstance(problem, Note):
        print(f"✓ {name}: correct" + (f" ({problem})" if problem else ""))
        return True
    print(f"✗ {name}: {problem}")
    return False


def run(fn: Callable, *args, names: tuple[str, ...] = ()):
    """Call fn on copies of args; return (result, None) or (None, what went wrong).

    Also says so when fn changes one of its array arguments in place.
    """
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    try:  # overflow is diagnosed, not warned about; a check prints one line, no warning
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fn(*copies)
    except Exception as exc:  # a learner's error is feedback, not a crash
        return None, f"your function raised {type(exc).__name__}: {_first_line(exc)}"
    for i, (a, c) in enumerate(zip(args, copies)):
        if isinstance(a, np.ndarray) and not np.array_equal(a, c, equal_nan=True):
            return None, _in_place(names, i)
    if result is None or result is Ellipsis:
        return None, "your function returned None: it is not implemented yet"
    return result, None


def _in_place(names: tuple[str, ...], i: int) -> str:
    arg = names[i] if i < len(names) else f"number {i + 1}"
    return (
        f"it changes its argument {arg} in place (x -= ..., x /= ..., out=x): the "
        "caller's array is destroyed; compute into a new array (z = x - m)"
    )


def _is_array(a) -> bool:
    return isinstance(a, np.ndarray) or is_tensor(a)


def _first_line(exc: Exception) -> str:
    """An error's message on one line (torch's list every signature a function accepts)."""
    lines = str(exc).strip().splitlines()
    return lines[0].rstrip(":") if lines else ""


def is_tensor(x) -> bool:
    """True for a torch tensor (Parameters included), without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_numpy(x) -> np.ndarray:
    """A learner's array, list or torch tensor (any device, requires_grad) as numpy."""
    if is_tensor(x):
        x = x.detach().cpu()
        if x.dtype.is_floating_point and x.element_size() < 4:
            x = x.float()  # numpy has no bfloat16; float16 answers are judged as floats
        return x.numpy()
    return np.asarray(x)


def as_array(result, expected_shape: tuple[int, ...] | None, what: str = "an array"):
    """A learner's result as a float array of the expected shape (None: any shape),
    or (None, why not)."""
    try:
        arr = to_numpy(result)
        if arr.dtype.kind not in "biuf":  # bool, int, unsigned, float: real numbers
            raise TypeError
        arr = arr.astype(float)
    except (TypeError, ValueError, RuntimeError):
        shape = "" if expected_shape is None else f" of shape {expected_shape}"
        return None, f"expected {what}{shape}; got {type(result).__name__}"
    if expected_shape is not None and arr.shape != expected_shape:
        return None, f"expected shape {expected_shape}; got {arr.shape}"
    return arr, None


def close(a, b, tol: float = 1e-6) -> bool:
    """True when two arrays have the same shape and agree to `tol` (NaN equals NaN)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))


def diagnose(result, wrong_answers: dict[str, np.ndarray], tol: float = 1e-6) -> str | None:
    """Name the first known mistake whose output equals `result` (to `tol`), if any."""
    for message, wrong in wrong_answers.items():
        if close(result, wrong, tol):
            return message
    return None


def mismatch(result, expected, what: str) -> str:
    """The message for values that match no known mistake: `what` was expected."""
    if not np.all(np.isfinite(result)):
        return f"the result contains inf or NaN; expected {what}"
    if close(result, expected, tol=1e-2):
        return (
            f"close to {what}, but only to about 1e-3: compute in float32 or float64, "
            "not float16, and do not round"
        )
    return f"wrong values: expected {what}"


def in_case(problem: str | None, *hints: tuple[str, Callable[[], bool]]) -> str | None:
    """Add the hint of the case an answer failed in, only when the answer shows that mistake.

    Each hint comes with `shown()`, the caller's test of the answer itself: typically, the
    same answer passes a probe that differs from the failed case only in what the hint is about
    (the number of heads, h·d_k = C, the size of the scores). The first hint whose test passes
    is appended. A problem that already names a mistake keeps its message, and a generic one
    ("wrong values", an error) whose answer shows none of the hinted mistakes stays generic,
    rather than blaming a mistake that was not made.
    """
    if problem is None or not problem.startswith(GENERIC):
        return problem
    for hint, shown in hints:
        if shown():
            return f"{problem} [{hint}]"
    return problem


KINDS = {"numpy": "numpy arrays", "torch": "torch tensors"}


def _as_kind(a, kind: str):
    """A numpy array argument as the given kind ("numpy" or "torch"); anything else unchanged."""
    if kind == "torch" and isinstance(a, np.ndarray):
        import torch  # only the checkers whose exercises give tensors get here

        return torch.from_numpy(a.copy())
    return a


def run_as(fn: Callable, kind: str, *args, names: tuple[str, ...] = ()):
    """Call fn with its array arguments as `kind`, the kind the exercise gives ("torch": what a
    model returns; "numpy"); when that raises, call it again with the other kind.

    Returns (result, problem, note). An answer that works only on the other kind is judged on
    that run, and `note` says so, with the error it raised on the kind the exercise gives, for
    the checker to print beside its verdict (the follow-ups of the exercise pass that kind).
    """
    given = [_as_kind(a, kind) for a in args]
    before = [to_numpy(a).copy() if is_tensor(a) else None for a in given]
    result, problem = run(fn, *given, names=names)
    for i, (a, b) in enumerate(zip(given, before)):
        if b is not None and not np.array_equal(to_numpy(a), b, equal_nan=True):
            return None, _in_place(names, i), None
    if problem is None or not problem.startswith("your function raised"):
        return result, problem, None
    other = "numpy" if kind == "torch" else "torch"
    again, other_problem = run(fn, *(_as_kind(a, other) for a in args), names=names)
    if other_problem is not None:
        return None, problem, None
    raised = problem.removeprefix("your function ")
    x = names[0] if names else "x"
    convert = f"np.asarray({x})" if other == "numpy" else f"torch.as_tensor({x})"
    note = (
        f"on {KINDS[other]} only: on {KINDS[kind]}, what this exercise gives, it {raised}; "
        f"start it with {x} = {convert}"
        + (", and each other array alike" if sum(map(_is_array, args)) > 1 else "")
        + ", or the follow-up fails the same way"
    )
    return again, None, note
