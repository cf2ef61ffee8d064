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

import contextlib
import functools
import importlib
import sys
import warnings
from collections.abc import Callable

import numpy as np


class Note(str):
    """A checker's verdict "correct", with a remark to print after it."""


# The start of every message that says something is wrong without naming a mistake
# (the first three may come from sizes read from the wrong place).
GENERIC = ("your function raised", "wrong values", "expected shape", "expected an array")


def checker(name: str, writes: tuple[Library, ...] = ()):
    """Turn `body(fn) -> problem` (None, a Note, or a message) into `check(fn) -> bool`.

    The check prints exactly one line and never raises: if reading a strange
    answer makes the body itself fail, that failure becomes the message.
    `writes`: the library's own versions of what the exercise asks the learner to write;
    an answer that calls one of them is rejected with a message naming it (see `watching`).
    """

    def wrap(body: Callable) -> Callable:
        @functools.wraps(body)
        def check(fn) -> bool:
            try:
                with watching(fn, writes) as used:
                    problem = body(fn)
                if used:
                    problem = _library_message(used[0], problem)
            except Exception as exc:  # an answer the checker could not read
                problem = f"could not check the answer ({type(exc).__name__}: {exc})"
            return report(name, problem)

        return check

    return wrap


class Library:
    """A library function (or method) that an exercise asks the learner to write.

    module, qualname: where it lives ("mha_lib.attention", "softmax" or
    "TransformerBlock.forward"); shown: how the message names it; load: import the module if
    it is not imported yet (False for a module that would import torch into a numpy checker:
    then it is watched only once something else has imported it).
    """

    def __init__(self, module: str, qualname: str, shown: str, load: bool = True):
        self.module, self.qualname, self.shown, self.load = module, qualname, shown, load

    def resolve(self):
        """(owner, attribute name, the function), or None when its module is not loaded."""
        if self.module not in sys.modules and not self.load:
            return None
        owner = importlib.import_module(self.module)
        *path, attr = self.qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        return owner, attr, getattr(owner, attr)


_IN_LEARNER = [0]  # > 0 while `run` calls the learner's function


def _library_message(shown: str, problem) -> str:
    """Reject an answer that called the library's own version of the exercise's function."""
    message = (
        f"it calls {shown}, the library's own version of what this exercise asks for: the "
        "exercise asks you to write it yourself (other library functions the notebook gave "
        "you are fine)"
    )
    if problem is None or isinstance(problem, Note):
        return message
    return f"{problem} (and it calls {shown}, which this exercise asks you to write yourself)"


def _functions_of(fn, depth: int = 0) -> list:
    """The plain functions behind a learner's callable: itself, through functools.partial,
    bound methods, decorators' __wrapped__, a callable object's __call__, and the functions it
    holds in its closure or defaults (a lambda wrapping a helper)."""
    if depth > 4:
        return []
    found = []
    try:
        if isinstance(fn, functools.partial):
            return [fn] + _functions_of(fn.func, depth + 1)
        inner = getattr(fn, "__func__", None) or getattr(fn, "__wrapped__", None)
        if inner is not None and inner is not fn:
            found += _functions_of(inner, depth + 1)
        if not hasattr(fn, "__code__") and not isinstance(fn, type) and callable(fn):
            call = type(fn).__call__
            if hasattr(call, "__code__"):
                found += _functions_of(call, depth + 1)
        if hasattr(fn, "__code__"):
            found.append(fn)
            held = [c.cell_contents for c in (fn.__closure__ or ()) if _filled(c)]
            held += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
            for value in held:
                if hasattr(value, "__code__") or isinstance(value, functools.partial):
                    found += _functions_of(value, depth + 1)
    except Exception:  # a strange object: nothing more to find
        pass
    return found


def _holds(f, original) -> bool:
    """True for a functools.partial holding `original` as its function or an argument."""
    if not isinstance(f, functools.partial):
        return False
    return any(a is original for a in (f.func, *f.args, *f.keywords.values()))


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


@contextlib.contextmanager
def watching(fn, libraries: tuple[Library, ...]):
    """While the body runs, replace each library function wherever the learner's function can
    reach it (the attribute of every loaded mha_lib module that holds it, the names bound to it
    in fn's globals, its closure and defaults, and for a method its class) by a wrapper that
    records a call made while `run` calls the learner's function; yield the list of what was
    called (each by its `shown` name). Everything is put back afterwards, also when something
    raises. A learner's function that IS the library function (or a partial of it) is recorded
    at once."""
    used: list[str] = []
    undo: list[Callable[[], None]] = []
    try:
        targets = [(lib, lib.resolve()) for lib in libraries]
        functions = _functions_of(fn)
        for lib, found in targets:
            if found is None:
                continue
            owner, attr, original = found
            if any(f is original or _holds(f, original) for f in functions):
                used.append(lib.shown)  # called without passing through a name we can replace
            wrapper = _recording(original, lib.shown, used)
            if isinstance(owner, type):  # a method: its class is the one place to replace it
                setattr(owner, attr, wrapper)
                undo.append(functools.partial(setattr, owner, attr, original))
                continue
            spaces = [
                vars(m) for name, m in list(sys.modules.items()) if name.startswith("mha_lib")
            ]
            spaces += [f.__globals__ for f in functions if hasattr(f, "__globals__")]
            for space in {id(s): s for s in spaces}.values():
                for key, value in list(space.items()):
                    if value is original:
                        space[key] = wrapper
                        undo.append(functools.partial(space.__setitem__, key, original))
            for f in functions:
                for cell in getattr(f, "__closure__", None) or ():
                    if _filled(cell) and cell.cell_contents is original:
                        cell.cell_contents = wrapper
                        undo.append(functools.partial(setattr, cell, "cell_contents", original))
                defaults = getattr(f, "__defaults__", None)
                if defaults and any(d is original for d in defaults):
                    f.__defaults__ = tuple(wrapper if d is original else d for d in defaults)
                    undo.append(functools.partial(setattr, f, "__defaults__", defaults))
        yield used
    finally:
        for restore in reversed(undo):
            restore()


def _recording(original: Callable, shown: str, used: list[str]) -> Callable:
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if _IN_LEARNER[0] > 0 and shown not in used:
            used.append(shown)
        return original(*args, **kwargs)

    return wrapper


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
            _IN_LEARNER[0] += 1
            try:
                result = fn(*copies)
            finally:
                _IN_LEARNER[0] -= 1
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


# What torch habits raise on the numpy arrays of notebooks 01-03, and what to write instead.
_TORCH_METHODS = {
    "permute": "numpy's is .transpose with the new order of ALL the axes, e.g. "
    "Y.transpose(0, 2, 1, 3)",
    "contiguous": "numpy needs no .contiguous(): reshape copies when it must",
    "unsqueeze": "numpy's is x[:, None] or np.expand_dims(x, axis)",
    "chunk": "numpy's is np.split(x, 3, axis=-1)",
    "softmax": "F.softmax calls it; compute the softmax with np.exp and a sum over the last "
    "axis, or use the softmax the notebook gives you",
    "exp": "numpy's is np.exp(x)",
    "masked_fill": "numpy's is np.where(mask, x, value)",
    "clone": "numpy's is x.copy()",
    "t": "numpy's is x.T",
    "float": "numpy's is x.astype(float)",
    "numel": "numpy's is x.size",
    "matmul": "numpy's is x @ y",
}


def numpy_habit(problem: str | None) -> str | None:
    """Name the torch habit behind an error that an answer raised on numpy arrays (torch's
    .view, .permute, .transpose(1, 2), dim=, keepdim=, torch functions on numpy arrays), or
    return the problem unchanged."""
    if problem is None or not problem.startswith(GENERIC[0]):
        return problem
    raised = problem.removeprefix("your function ")
    habit = None
    if "view() takes from" in problem or "as a data type" in problem:
        habit = (
            "it calls .view(...) with sizes on a numpy array, a torch habit: numpy's view "
            "reinterprets the dtype; use .reshape(...)"
        )
    elif "axes don't match array" in problem:
        habit = (
            "numpy's .transpose(...) takes the new order of ALL the axes (e.g. "
            ".transpose(0, 2, 1, 3)), not torch's two axes to swap: .transpose(1, 2) in torch "
            "is np.swapaxes(x, 1, 2), and k.transpose(-2, -1) is np.swapaxes(k, -2, -1)"
        )
    elif "unexpected keyword argument 'dim'" in problem:
        habit = "numpy's keyword is axis=..., not torch's dim=..."
    elif "unexpected keyword argument 'keepdim'" in problem:
        habit = "numpy's keyword is keepdims=True (with an s), not torch's keepdim=True"
    elif "must be Tensor, not numpy.ndarray" in problem or "expected Tensor as element" in problem:
        name = problem.split("raised TypeError: ", 1)[-1].split("(", 1)[0]
        function = f"torch.{name}()" if name.isidentifier() else "torch.cat or torch.stack"
        habit = (
            f"it passes a numpy array to {function}, which takes tensors: the arguments are "
            "numpy arrays; convert them first with torch.as_tensor(x), or compute with numpy "
            "(np.exp, @, np.concatenate, ...)"
        )
    elif "'numpy.ndarray' object has no attribute '" in problem:
        method = problem.split("has no attribute '", 1)[1].split("'", 1)[0]
        if method in _TORCH_METHODS:
            habit = (
                f"numpy arrays have no .{method}(), a torch tensor method: {_TORCH_METHODS[method]}"
            )
    elif "module 'numpy' has no attribute 'softmax'" in problem:
        habit = (
            "numpy has no np.softmax: compute it with np.exp and a sum over the last axis "
            "(or use the softmax the notebook gives you)"
        )
    elif "'int' object is not callable" in problem:
        habit = (
            "it calls an int: numpy's x.size is the number of entries, not torch's "
            "x.size(dim); use x.shape[dim]"
        )
    elif "unsupported operand type(s) for @: 'numpy.ndarray' and 'Tensor'" in problem or (
        "for @: 'Tensor' and 'numpy.ndarray'" in problem
    ):
        habit = (
            "it multiplies a numpy array by a torch tensor: convert one side first "
            "(torch.as_tensor(x), or t.numpy())"
        )
    return problem if habit is None else f"{habit} (it {raised})"


# (rtol, atol) an answer must meet, by the precision it was computed in (notebooks 16 and 17):
# float64 answers that took one scalar through float32 (torch.tensor(g)) still pass; float32's
# rounding is ~1e-7
TOLERANCE = {"float64": (1e-6, 1e-9), "float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2)}


def as_byte_count(result, several: str) -> tuple[float | None, str | None]:
    """A learner's count of bytes as a float (int, float, numpy number, 0-d array or tensor),
    or (None, why not); several: what to say to an answer that returns several numbers."""
    if isinstance(result, (bool, np.bool_)):
        return None, f"expected a number of bytes; got a bool ({result})"
    if isinstance(result, (tuple, list, dict)):
        return None, f"it returns several numbers (a {type(result).__name__}): {several}"
    if isinstance(result, str):
        return None, f"expected a number of bytes; got a str ({result!r}): return the number"
    value, problem = as_array(result, None, "a number")
    if problem:
        return None, problem
    if value.shape != ():
        return None, f"expected one number of bytes; got an array of shape {value.shape}"
    return float(value), None


def judge_byte_counts(fn, cases, reference, mistakes, names: str, formula: str, several: str):
    """The verdict on fn, a learner's count of bytes, over cases (tuples of arguments): None when
    fn(*case) == reference(*case) for every case, else what is wrong: fn's error, an answer
    that is not one number (several: what to say when it returns several), the same number for
    every case, the first catalogued mistake whose formula fits every case (mistakes(*case) ->
    {message: the number that mistake gives}), or the first case it gets wrong, written as
    "for (names) = case: expected formula = the number, got its number"."""
    values = []
    for case in cases:
        result, problem = run(fn, *case)
        if problem:
            return problem
        value, problem = as_byte_count(result, several)
        if problem:
            return problem
        values.append(value)
    expected = [reference(*case) for case in cases]
    if values == expected:
        return None
    if all(v == values[0] for v in values):
        return "it returns the same number for every case: use the arguments"
    catalogue = [mistakes(*case) for case in cases]
    for message in catalogue[0]:  # a mistake is named when its formula fits every case
        if all(np.isclose(v, m[message], rtol=1e-9, atol=0) for v, m in zip(values, catalogue)):
            return message
    i = next(i for i, (v, e) in enumerate(zip(values, expected)) if v != e)
    shown = int(values[i]) if float(values[i]).is_integer() else values[i]
    return f"for ({names}) = {cases[i]}: expected {formula} = {expected[i]}, got {shown}"


def judge_array(result, shape, expected, others, mistakes, what, mismatch, note=None):
    """The verdict (problem or None, note or None) on an array answer `result` that should be
    `expected`, of shape `shape`. An answer of a wrong shape that `others` lists ({shape: (its
    catalogued mistakes, the message when none fits)}) is named by the first mistake it equals,
    or by that message; then the shape and the container are checked (`as_array`); an answer
    equal to expected at its own precision passes with `note`; else it is named by the first of
    mistakes() ({message: wrong answer}, computed only then) it equals, or by
    mismatch(value, expected, what, precision)."""
    got = getattr(result, "shape", None)
    try:
        got = None if got is None else tuple(got)
    except TypeError:  # an object whose shape is not a tuple of sizes
        got = None
    if got in others and got != shape:
        value, problem = as_array(result, got)
        if problem:
            return problem, None
        wrong, otherwise = others[got]
        tol = max(1e-6, TOLERANCE[precision(result)][0])
        return diagnose(value, wrong, tol=tol) or otherwise, None
    value, problem = as_array(result, shape, "an array")
    if problem:
        return problem, None
    prec = precision(result)
    if prec != "float16" and within(value, expected, prec):
        return None, note
    named = diagnose(value, mistakes(), tol=max(1e-6, TOLERANCE[prec][0]))
    return named or mismatch(value, expected, what, prec), None


def within(value, expected, prec: str) -> bool:
    """value equals expected, shape and numbers, to the precision `prec` of `TOLERANCE`;
    infinities equal where both are the same infinity."""
    rtol, atol = TOLERANCE[prec]
    return value.shape == np.shape(expected) and bool(
        np.allclose(value, expected, rtol=rtol, atol=atol)
    )


def first_note(notes: list):
    """The first of the notes that is not None, as a `Note` (None when there is none)."""
    notes = [n for n in notes if n]
    return Note(notes[0]) if notes else None


def precision(result) -> str:
    """The float precision an answer was computed in: "float16" (bfloat16 too), "float32" or
    "float64" (lists, Python numbers and integer arrays count as float64)."""
    if is_tensor(result):
        size = result.element_size() if result.dtype.is_floating_point else 8
    else:
        dtype = getattr(result, "dtype", None)
        size = dtype.itemsize if dtype is not None and dtype.kind == "f" else 8
    return {2: "float16", 4: "float32"}.get(size, "float64")
