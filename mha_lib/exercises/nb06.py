"""Checkers for notebook 06 (heads that learn to specialise).

- `check_q_composition(fn)`: fn(W_QK, W_OV) -> one number, the Q-composition
  ‖W_OV W_QK‖_F / (‖W_QK‖_F ‖W_OV‖_F) of a later head's QK circuit with an earlier head's OV
  circuit, both (C, C) (the test matrices are random, of rank d < C, and not symmetric, so the
  K-composition and the wrong orders give different numbers);
- `check_induction_score(fn)`: fn(A (B, h, 2T, 2T), T) -> (h,), the mean weight from query i
  of the second copy (T <= i < 2T) on key i - T + 1, the token after the previous occurrence.

The references are written in numpy here (tests check that they equal `mha_lib.toy.circuits`),
so this module does not import torch at the top. The notebook's own matrices are torch tensors,
so an answer may be written in either library: each function is called with numpy arrays, and
when that raises, again with the same arrays as torch tensors (`_call`); its result may be a
number, a numpy array or a tensor. The induction test weights are random rows that sum to
1, with N ≠ h ≠ B, so a wrong axis or a wrong diagonal gives a different number.
"""

from __future__ import annotations

import numpy as np

from ._base import as_array, checker, close, diagnose, mismatch, run, to_numpy

__all__ = ["check_induction_score", "check_q_composition"]


def _call(fn, *arrays):
    """run(fn, *arrays) with numpy arrays; if fn raises, again with them as torch tensors
    (an answer written with torch functions, `.mean(dim=...)`, `torch.linalg.norm`, ...).
    Returns (result, None) or (None, what went wrong)."""
    result, problem = run(fn, *arrays)
    if problem is None or not problem.startswith("your function raised"):
        return result, problem
    try:
        import torch
    except ImportError:  # pragma: no cover - notebook 06 needs torch anyway
        return result, problem
    tensors = [torch.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a for a in arrays]
    result, torch_problem = run(fn, *tensors)
    if torch_problem is None or torch_problem == problem:
        return result, torch_problem
    raised = torch_problem.removeprefix("your function raised ")
    return None, f"{problem} with numpy arrays, and {raised} with torch tensors"


def _values(result):
    """A result's values as a numpy array when they can be read (for its shape), else None."""
    try:
        return to_numpy(result)
    except (TypeError, ValueError, RuntimeError):
        return None


def _weights(seed: int, B: int, h: int, N: int) -> np.ndarray:
    """Random attention weights (B, h, N, N), every row summing to 1."""
    scores = np.random.default_rng(seed).standard_normal((B, h, N, N)) * 2.0
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)  # (B, h, N, N)


def _stripe(A: np.ndarray, offset: int) -> np.ndarray:
    """A[..., i, i + offset] for every i where it exists: (B, h, n)."""
    return np.diagonal(A, offset=offset, axis1=-2, axis2=-1)


# ---------------------------------------------------------------------------- Q-composition


def _rank_d(rng: np.random.Generator, C: int, d: int) -> np.ndarray:
    """A random (C, C) matrix of rank d, like a head's circuit W_Q W_Kᵀ or W_V W_O."""
    return rng.standard_normal((C, d)) @ rng.standard_normal((d, C))


def _fro(M: np.ndarray) -> float:
    return float(np.linalg.norm(M))


def _composition_mistakes(W_QK: np.ndarray, W_OV: np.ndarray) -> dict[str, np.ndarray]:
    norms = _fro(W_QK) * _fro(W_OV)
    return {
        "it transposes one of the two circuits (W_OV.T @ W_QK or W_QK.T @ W_OV): what the "
        "earlier head writes is the row x W_OV, and the query is that row times W_QK, "
        "(x W_OV) W_QK: use ‖W_OV W_QK‖, no transpose": np.array(_fro(W_OV.T @ W_QK) / norms),
        "that is K-composition, ‖W_QK W_OVᵀ‖: the keys read the earlier head there. The "
        "queries read it from the left, (x W_OV) W_QK: use ‖W_OV W_QK‖": np.array(
            _fro(W_QK @ W_OV.T) / norms
        ),
        "that is ‖W_QK W_OV‖, the product in the wrong order (W_QK @ W_OV, or W_OV.T @ "
        "W_QK.T, or the arguments taken as (W_OV, W_QK): the function gets (W_QK, W_OV)); what "
        "the earlier head writes, x W_OV, enters the query from the left, so the matrix is "
        "W_OV @ W_QK": np.array(_fro(W_QK @ W_OV) / norms),
        "it is not normalised: divide ‖W_OV W_QK‖_F by ‖W_QK‖_F ‖W_OV‖_F": np.array(
            _fro(W_OV @ W_QK)
        ),
        "it uses the spectral norm (ord=2, the largest singular value); the score uses "
        "Frobenius norms, np.linalg.norm(M) with no ord": np.array(
            np.linalg.norm(W_OV @ W_QK, 2) / (np.linalg.norm(W_QK, 2) * np.linalg.norm(W_OV, 2))
        ),
        "it uses the nuclear norm (ord='nuc', the sum of the singular values); the score uses "
        "Frobenius norms, np.linalg.norm(M) with no ord": np.array(
            np.linalg.norm(W_OV @ W_QK, "nuc")
            / (np.linalg.norm(W_QK, "nuc") * np.linalg.norm(W_OV, "nuc"))
        ),
        "it divides by ‖W_QK‖_F only: the score divides by both norms, ‖W_QK‖_F ‖W_OV‖_F": (
            np.array(_fro(W_OV @ W_QK) / _fro(W_QK))
        ),
        "it divides by ‖W_OV‖_F only: the score divides by both norms, ‖W_QK‖_F ‖W_OV‖_F": (
            np.array(_fro(W_OV @ W_QK) / _fro(W_OV))
        ),
        "it squares the norms: use ‖W_OV W_QK‖_F / (‖W_QK‖_F ‖W_OV‖_F), no squares": np.array(
            _fro(W_OV @ W_QK) ** 2 / norms**2
        ),
        "it adds the two norms in the denominator; multiply them": np.array(
            _fro(W_OV @ W_QK) / (_fro(W_QK) + _fro(W_OV))
        ),
        "that is an element-wise product (*); composition is a matrix product (@)": np.array(
            _fro(W_OV * W_QK) / norms
        ),
        "that is the cosine between the two matrices read as vectors; composition multiplies "
        "them as matrices, W_OV @ W_QK": np.array(np.sum(W_OV * W_QK) / norms),
        "it uses W_OV twice (that would be V-composition of a head with itself); the later "
        "head's query side is W_QK": np.array(_fro(W_OV @ W_OV) / _fro(W_OV) ** 2),
    }


@checker("q_composition")
def check_q_composition(fn):
    """Check fn(W_QK, W_OV) -> ‖W_OV W_QK‖_F / (‖W_QK‖_F ‖W_OV‖_F), both (C, C)."""
    problem = None
    for seed, (C, d) in enumerate(((7, 3), (10, 4))):
        rng = np.random.default_rng(20 + seed)
        W_QK, W_OV = _rank_d(rng, C, d), _rank_d(rng, C, d)
        expected = np.array(_fro(W_OV @ W_QK) / (_fro(W_QK) * _fro(W_OV)))
        result, problem = _call(fn, W_QK, W_OV)
        if problem is None and np.shape(_values(result)) == (C, C):
            problem = (
                f"it returns a ({C}, {C}) matrix, not one number: the score is the Frobenius "
                "norm of W_OV @ W_QK over the two norms"
            )
        if problem is None:
            got, problem = as_array(result, (), "one number")
            if problem is None and not close(got, expected):
                problem = diagnose(got, _composition_mistakes(W_QK, W_OV)) or mismatch(
                    got, expected, "‖W_OV W_QK‖_F / (‖W_QK‖_F ‖W_OV‖_F), one number"
                )
        if problem is not None:
            break
    return problem


# ---------------------------------------------------------------------------- induction


def _induction_mistakes(A: np.ndarray, T: int) -> dict[str, np.ndarray]:
    def mean(offset, start, stop):  # mean of A[i, i + offset] for start <= i < stop
        rows = np.arange(start, stop)
        return A[:, :, rows, rows + offset].mean(axis=(0, 2))

    return {
        "that is the weight on the previous occurrence itself, A[i, i - T] (a duplicate-token "
        "head); an induction head looks one further, at i - T + 1": mean(-T, T, 2 * T),
        "that is the previous token A[i, i - 1], not the token after the previous occurrence "
        "(i - T + 1)": mean(-1, T, 2 * T),
        "it looks at i - T - 1, the token BEFORE the previous occurrence; the induction "
        "target is the one after it, i - T + 1": mean(-T - 1, T + 1, 2 * T),
        "it starts at query T - 1: the last token of the first copy has no earlier "
        "occurrence; use the queries T <= i < 2T": mean(1 - T, T - 1, 2 * T - 1),
        "it stops at query 2T - 2 and leaves out the last query 2T - 1; use T <= i < 2T": mean(
            1 - T, T, 2 * T - 1
        ),
        "it reads the transposed matrix, A[i - T + 1, i]: rows are queries and columns are keys": A[
            :, :, np.arange(1, T + 1), np.arange(T, 2 * T)
        ].mean(axis=(0, 2)),
        "it averages the heads together: return one score per head, (h,)": np.full(
            A.shape[1], mean(1 - T, T, 2 * T).mean()
        ),
        "it starts at query T + 1; the first query of the second copy, i = T, has its earlier "
        "occurrence at 0 and its induction key at 1: use T <= i < 2T": mean(1 - T, T + 1, 2 * T),
        "it includes query T - 1: the diagonal at offset 1 - T starts at query T - 1 (key 0), "
        "one before the second copy; drop its first entry ([..., 1:]) to keep T <= i < 2T": mean(
            1 - T, T - 1, 2 * T
        ),
        "the offset has the wrong sign: np.diagonal(A, T - 1) reads A[i, i + T - 1], above the "
        "diagonal (keys after the query); the induction stripe lies below it, offset 1 - T": (
            A[:, :, np.arange(0, T), np.arange(T - 1, 2 * T - 1)].mean(axis=(0, 2))
        ),
        "it sums over the batch and the queries; the score is their mean": (
            mean(1 - T, T, 2 * T) * A.shape[0] * T
        ),
        "it sums over the queries (T of them); the score is their mean": mean(1 - T, T, 2 * T) * T,
        "it uses the first sequence only, A[0]; average over the batch too": A[
            0, :, np.arange(T, 2 * T), np.arange(1, T + 1)
        ].mean(axis=0),
    }


@checker("induction_score")
def check_induction_score(fn):
    """Check fn(A (B, h, 2T, 2T), T) -> (h,) = mean over b and T <= i < 2T of A[b, :, i, i-T+1]."""
    problem = None
    for seed, (B, h, T) in enumerate(((2, 3, 5), (1, 2, 4))):
        A = _weights(10 + seed, B, h, 2 * T)
        rows = np.arange(T, 2 * T)
        expected = A[:, :, rows, rows - T + 1].mean(axis=(0, 2))  # (h,)
        result, problem = _call(fn, A, T)
        if problem is None:
            got, problem = as_array(result, (h,))
            shape = np.shape(_values(result))
            if problem is not None and shape == (B, h):
                problem = f"expected shape {(h,)}; got {(B, h)}: average over the batch too"
            elif problem is not None and shape == (T,):
                problem = (
                    f"expected shape {(h,)}; got {(T,)}, one number per query of the second "
                    "copy: it averages over the batch and the heads; average over the batch and "
                    "the queries (axes 0 and 2) and keep the heads"
                )
            if problem is None and not close(got, expected):
                problem = diagnose(got, _induction_mistakes(A, T)) or mismatch(
                    got,
                    expected,
                    "per head, the mean of A[b, head, i, i - T + 1] over b and T <= i < 2T",
                )
        if problem is not None:
            break
    return problem
