"""One way to check that two arrays are equal, used by every notebook, solution and test.

`assert_close(actual, expected)` passes when every element satisfies
|actual - expected| <= atol + rtol · |expected|, the rule of `np.testing.assert_allclose` and
`torch.testing.assert_close`. When it fails, its message says how many elements differ, where
the largest difference is and what the two values are there, so a failed check in a notebook
says what went wrong instead of raising an empty `AssertionError` (as `assert torch.allclose(...)`
does).

It takes numpy arrays, torch tensors (any device and dtype; compared on the CPU in float64),
Python numbers and nested lists, in any mix. It imports numpy only. `torch.testing.assert_close`
would do as well, but its first call imports `torch.distributed.tensor` and sympy: 46 MB more in
every kernel that uses it (measured on torch 2.13.0; `tests/test_testing.py` checks that it still
imports them), where Binder gives all of a learner's kernels 2 GB together.

Tolerances, when not given, follow the less precise of the two dtypes, as torch's do:
| dtype | rtol | atol |
|---|---|---|
| float16 | 1e-3 | 1e-5 |
| bfloat16 | 1.6e-2 | 1e-5 |
| float32, complex64 | 1.3e-6 | 1e-5 |
| float64, complex128, Python floats | 1e-7 | 1e-7 |
| integers, booleans | 0 | 0 (exact) |
Pass `rtol=0, atol=0` to ask for exact equality. Shapes must be equal (nothing is broadcast),
except that `expected` may be a single number, which every element must then equal.
Defined in notebook 00 (how the series checks a claim); used from notebook 00 on.
"""

from __future__ import annotations

import numpy as np

__all__ = ["assert_close"]

# default (rtol, atol) by dtype name, from the least to the most precise
_DEFAULTS = {
    "bfloat16": (1.6e-2, 1e-5),
    "float16": (1e-3, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex128": (1e-7, 1e-7),
}


def _as_array(x) -> tuple[np.ndarray, str]:
    """x as a numpy array on the CPU, and the name of its original dtype."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        name = str(x.dtype).removeprefix("torch.")
        t = x.detach().cpu()
        if name in ("bfloat16", "float16"):
            t = t.float()  # numpy has no bfloat16
        if t.is_conj():
            t = t.resolve_conj()
        return t.numpy(), name
    if isinstance(x, float):
        return np.asarray(x, dtype=np.float64), "float64"
    a = np.asarray(x)
    return a, a.dtype.name


def _is_sequence_of_arrays(x) -> bool:
    """A tuple or list holding arrays or tensors, e.g. (output, lse): compared pairwise."""
    return isinstance(x, tuple | list) and any(hasattr(item, "shape") for item in x)


def _default_tolerances(*names: str) -> tuple[float, float]:
    known = [_DEFAULTS[n] for n in names if n in _DEFAULTS]
    if not known:
        return 0.0, 0.0  # integers and booleans: exact
    return max(r for r, _ in known), max(a for _, a in known)


def _where(index: tuple[int, ...]) -> str:
    return "" if not index else f" at index {tuple(int(i) for i in index)}"


def assert_close(
    actual,
    expected,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    msg: str = "",
) -> None:
    """Raise AssertionError unless |actual - expected| <= atol + rtol · |expected| everywhere.

    actual and expected: arrays, tensors or numbers of the same shape, or expected a single
    number that every element of actual must equal; or two tuples of them, e.g. (output, lse),
    compared pair by pair. rtol and atol default by
    dtype (this module's table); give one and the other keeps its default. equal_nan: NaN in
    both places counts as equal. msg: what is being compared, printed first in the message.
    """
    if _is_sequence_of_arrays(actual) or _is_sequence_of_arrays(expected):
        if not isinstance(expected, tuple | list) or len(actual) != len(expected):
            n = len(expected) if isinstance(expected, tuple | list) else type(expected).__name__
            raise AssertionError(f"{msg or 'actual'}: {len(actual)} arrays; expected {n}")
        for i, (a_i, e_i) in enumerate(zip(actual, expected)):
            where = f"{msg}[{i}]" if msg else f"element {i}"
            assert_close(a_i, e_i, rtol=rtol, atol=atol, equal_nan=equal_nan, msg=where)
        return
    a, a_name = _as_array(actual)
    e, e_name = _as_array(expected)
    default_rtol, default_atol = _default_tolerances(a_name, e_name)
    rtol = default_rtol if rtol is None else float(rtol)
    atol = default_atol if atol is None else float(atol)
    head = f"{msg}: " if msg else ""
    if e.ndim == 0 and a.ndim > 0:
        e = np.broadcast_to(e, a.shape)  # one number for every element: rows sum to 1.0
    if a.shape != e.shape:
        raise AssertionError(
            f"{head}actual has shape {a.shape}; expected shape {e.shape} (nothing is broadcast)"
        )
    if a.dtype == bool or e.dtype == bool:
        a, e = a.astype(np.int64), e.astype(np.int64)
    if np.iscomplexobj(a) or np.iscomplexobj(e):
        a, e = a.astype(np.complex128), e.astype(np.complex128)
    else:
        a, e = a.astype(np.float64), e.astype(np.float64)

    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
        same = a == e  # exact matches, equal infinities among them
        finite = np.isfinite(a) & np.isfinite(e)
        ok = same | (finite & (diff <= atol + rtol * np.abs(e)))
    a_nan, e_nan = np.isnan(a), np.isnan(e)
    ok &= ~(a_nan | e_nan)
    if equal_nan:
        ok |= a_nan & e_nan
    if ok.all():
        return

    bad = ~ok
    n_bad, n = int(bad.sum()), a.size
    lines = [
        f"{head}not close: {n_bad} of {n} elements ({100 * n_bad / n:.1f} %) differ by more "
        f"than atol + rtol·|expected| (atol = {atol:g}, rtol = {rtol:g})."
    ]
    nan_mismatch = bad & (a_nan != e_nan)
    if nan_mismatch.any():
        i = tuple(np.argwhere(nan_mismatch)[0])
        lines.append(f"First NaN in only one of them{_where(i)}: actual {a[i]}, expected {e[i]}.")
    if (bad & a_nan & e_nan).any():
        i = tuple(np.argwhere(bad & a_nan & e_nan)[0])
        lines.append(f"NaN in both{_where(i)}: pass equal_nan=True if that is fine.")
    measured = np.where(bad & np.isfinite(diff), diff, -1.0)
    if (measured >= 0).any():
        i = np.unravel_index(int(np.argmax(measured)), a.shape)
        lines.append(
            f"Largest absolute difference: {diff[i]:.3g}{_where(i)} "
            f"(actual {a[i]:.6g}, expected {e[i]:.6g}; allowed there: "
            f"{atol + rtol * abs(e[i]):.3g})."
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(bad & np.isfinite(diff) & (e != 0), diff / np.abs(e), -1.0)
        if (rel >= 0).any():
            j = np.unravel_index(int(np.argmax(rel)), a.shape)
            lines.append(f"Largest relative difference: {rel[j]:.3g}{_where(j)}.")
    elif not (bad & (a_nan | e_nan)).any():  # an infinity against another value
        i = tuple(np.argwhere(bad)[0])
        lines.append(f"First mismatch{_where(i)}: actual {a[i]}, expected {e[i]}.")
    raise AssertionError("\n".join(lines))
