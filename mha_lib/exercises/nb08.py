"""Checkers for notebook 08 (efficient attention).

- `check_sliding_window_mask(fn)`: fn(N, window) -> the (N, N) numpy bool
  mask of causal sliding-window attention (True = may attend): query i sees
  keys i - window + 1 .. i;
- `check_chunk_causal_mask(fn)`: fn(n, m) -> the (n, m) numpy bool causal
  mask for a chunk of n new queries against a cache of m keys (the chunk's
  own keys last), aligned to the bottom right;
- `check_online_softmax_step(fn)`: fn(m, s, acc, scores, v_block) ->
  (m_new, s_new, acc_new), one step of the online softmax over a block of keys.

This module imports torch, so `mha_lib.exercises` does not import it: notebooks
write `from mha_lib.exercises.nb08 import ...`.
"""

from __future__ import annotations

import numpy as np
import torch

from ._base import checker, diagnose, run

__all__ = ["check_chunk_causal_mask", "check_online_softmax_step", "check_sliding_window_mask"]


def _bool_mask(result, shape: tuple[int, ...]):
    """A learner's mask as a numpy bool array of `shape`, or (None, what is wrong)."""
    if isinstance(result, torch.Tensor):
        result = result.detach().cpu().numpy()
    if not isinstance(result, np.ndarray):
        return None, f"expected a numpy bool array; got {type(result).__name__}"
    if result.dtype != bool:
        return None, (
            f"the mask has dtype {result.dtype}; expected bool (True = may attend): a float or "
            "int mask means something else to attention functions (it is added to the scores)"
        )
    if result.shape != shape:
        return None, f"the mask has shape {result.shape}; expected {shape}"
    return result, None


def _grid(n: int, m: int):
    return np.arange(n)[:, None], np.arange(m)[None, :]  # (n, 1) queries, (1, m) keys


# ---------------------------------------------------------------------------- sliding window


def _window_mistakes(N: int, w: int) -> dict[str, np.ndarray]:
    i, j = _grid(N, N)
    right = (j <= i) & (i - j < w)
    return {
        "it is inverted: True must mark the keys a query MAY attend to (the numpy core's and "
        "SDPA's convention)": ~right,
        "off by one: query i should see `window` keys (itself and the window - 1 before it); "
        "yours sees window + 1": (j <= i) & (i - j <= w),
        "off by one: query i should see `window` keys (itself and the window - 1 before it); "
        "yours sees window - 1": (j <= i) & (i - j < w - 1),
        "the window is on the wrong side: query i must see the tokens before it (j <= i), "
        "not the ones after it": (j >= i) & (j - i < w),
        "the window is two-sided: query i also sees |i - j| < window tokens in its future; "
        "a causal window keeps only j <= i": np.abs(i - j) < w,
        "it is not causal: the window bounds the past but query i still sees every key "
        "j > i; add j <= i": i - j < w,
        "it leaves out the diagonal: query i must see itself (key j = i)": (j < i) & (i - j <= w),
    }


@checker("sliding_window_mask")
def check_sliding_window_mask(fn):
    """Check fn(N, window) -> (N, N) bool, True where i - window < j <= i."""
    problem = None
    for N, w in ((7, 3), (6, 1), (4, 6), (1, 2), (9, 4)):
        result, problem = run(fn, N, w)
        if problem is None:
            mask, problem = _bool_mask(result, (N, N))
        if problem is None:
            i, j = _grid(N, N)
            if not np.array_equal(mask, (j <= i) & (i - j < w)):
                problem = diagnose(mask, _window_mistakes(N, w)) or (
                    f"wrong entries for N = {N}, window = {w}: row i must be True exactly "
                    "at i - window < j <= i"
                )
        if problem is not None:
            break
    return problem


# ---------------------------------------------------------------------------- chunk against a cache


def _chunk_mistakes(n: int, m: int) -> dict[str, np.ndarray]:
    i, j = _grid(n, m)
    right = j <= m - n + i
    return {
        "it is inverted: True must mark the keys a query MAY attend to (True = may NOT attend "
        "is nn.MultiheadAttention's convention)": ~right,
        "it is aligned to the top left (query i sees keys 0 .. i, what is_causal=True does "
        "when n != m); the n queries are the LAST n of the m tokens, so query i sees keys "
        "0 .. m - n + i": j <= i,
        "off by one: query i (at position m - n + i) must see its own key; yours blocks it": j
        < m - n + i,
        "off by one: query i (at position m - n + i) sees one key from its future": j
        <= m - n + i + 1,
        "it blocks nothing: a query of the chunk must not see the chunk's later tokens": np.ones(
            (n, m), dtype=bool
        ),
        "it blocks the chunk's own tokens: query i must see the cache AND the chunk's tokens "
        "up to itself": np.broadcast_to(j < m - n, (n, m)),
    }


@checker("chunk_causal_mask")
def check_chunk_causal_mask(fn):
    """Check fn(n, m) -> (n, m) bool, True where j <= m - n + i."""
    problem = None
    for n, m in ((3, 7), (1, 5), (4, 4), (2, 6), (5, 9)):
        result, problem = run(fn, n, m)
        if problem is None and isinstance(result, np.ndarray | torch.Tensor):
            shape = tuple(result.shape)
            if shape == (m, n) and n != m:
                problem = f"it has shape (m, n) = {shape}; expected (n, m): rows are the queries"
            elif shape == (m, m) and n != m:
                problem = (
                    f"it is the full (m, m) = {shape} causal mask; keep the rows of the n new "
                    "queries, the last n"
                )
        if problem is None:
            mask, problem = _bool_mask(result, (n, m))
        if problem is None:
            i, j = _grid(n, m)
            if not np.array_equal(mask, j <= m - n + i):
                problem = diagnose(mask, _chunk_mistakes(n, m)) or (
                    f"wrong entries for n = {n}, m = {m}: row i must be True exactly at "
                    "j <= m - n + i"
                )
        if problem is not None:
            break
    return problem


# ---------------------------------------------------------------------------- online softmax


def _step(m, s, acc, scores, v, *, rescale_s=True, rescale_acc=True, sign=1, keep_old_max=True):
    """The reference step and its usual mistakes (torch float64)."""
    block_max = scores.amax(dim=-1, keepdim=True)  # (N, 1)
    m_new = torch.maximum(m, block_max) if keep_old_max else block_max
    rescale = torch.exp(sign * (m - m_new))  # (N, 1)
    p = torch.exp(scores - m_new)  # (N, b)
    s_new = (s * rescale if rescale_s else s) + p.sum(dim=-1, keepdim=True)
    acc_new = (acc * rescale if rescale_acc else acc) + p @ v  # (N, d_v)
    return m_new, s_new, acc_new


def _softmax_cases():
    """(m, s, acc, scores, v_block) cases: a first block (m = -inf) and a later one."""
    gen = torch.Generator().manual_seed(8)
    N, b, d_v = 5, 3, 2
    first = torch.randn(N, 4, generator=gen, dtype=torch.float64) * 2  # an earlier block
    m = first.amax(dim=-1, keepdim=True)  # (N, 1)
    s = torch.exp(first - m).sum(dim=-1, keepdim=True)  # (N, 1)
    acc = torch.exp(first - m) @ torch.randn(4, d_v, generator=gen, dtype=torch.float64)
    scores = torch.randn(N, b, generator=gen, dtype=torch.float64) * 2  # (N, b)
    scores[:2] += 4.0  # rows 0, 1: the new block raises the max; the others may not
    v = torch.randn(b, d_v, generator=gen, dtype=torch.float64)  # (b, d_v)
    empty = (
        torch.full((N, 1), -torch.inf, dtype=torch.float64),
        torch.zeros(N, 1, dtype=torch.float64),
        torch.zeros(N, d_v, dtype=torch.float64),
    )
    return [(m, s, acc, scores, v), (*empty, scores, v)]


@checker("online_softmax_step")
def check_online_softmax_step(fn):
    """Check fn(m (N, 1), s (N, 1), acc (N, d_v), scores (N, b), v_block (b, d_v)) -> triple."""
    problem = None
    for case in _softmax_cases():
        result, problem = run(fn, *(t.clone() for t in case))
        if problem is None and (not isinstance(result, tuple | list) or len(result) != 3):
            problem = "expected a triple (m_new, s_new, acc_new)"
        if problem is None:
            try:
                got = [torch.as_tensor(np.asarray(r, dtype=np.float64)) for r in result]
            except (TypeError, ValueError, RuntimeError):
                got, problem = None, "m_new, s_new and acc_new must be arrays or tensors"
        if problem is None:
            problem = _diagnose_step(got, case)
        if problem is not None:
            break
    return problem


def _same(a, b) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-9, atol=1e-12))


def _diagnose_step(got, case) -> str | None:
    m, s, acc, scores, v = case
    expected = _step(*case)
    shapes = [tuple(t.shape) for t in expected]
    if [tuple(t.shape) for t in got] != shapes:
        return (
            f"shapes {[tuple(t.shape) for t in got]}; expected {shapes} (m, s keep a (N, 1) axis)"
        )
    if all(_same(a, b) for a, b in zip(got, expected)):
        return None
    m_new, s_new, acc_new = got
    if not _same(m_new, expected[0]):
        if _same(m_new, scores.amax(dim=-1, keepdim=True)):
            return "m_new is the block's max only; it must be max(m, the block's max)"
        if _same(m_new, m):
            return "m_new is the old max: update it with the block's max"
        return "wrong m_new: expected max(m, max of the block's scores)"
    if _same(acc_new, expected[2] / expected[1]):
        return (
            "acc_new is normalised: keep the running sum of exp(score - m) v and divide by s "
            "only at the very end"
        )
    mistakes = {
        "forgot to rescale the running sum: s was summed relative to the old max, so it must "
        "be multiplied by exp(m - m_new)": {"rescale_s": False},
        "forgot to rescale acc: the values were weighted relative to the old max, so acc must "
        "be multiplied by exp(m - m_new)": {"rescale_acc": False},
        "forgot to rescale both s and acc by exp(m - m_new) when the max changes": {
            "rescale_s": False,
            "rescale_acc": False,
        },
        "the rescale factor is upside down: exp(m - m_new) (at most 1), not exp(m_new - m)": {
            "sign": -1
        },
    }
    for message, kwargs in mistakes.items():
        wrong = _step(m, s, acc, scores, v, **kwargs)
        if _same(s_new, wrong[1]) and _same(acc_new, wrong[2]):
            return message
    p_raw = torch.exp(scores)
    if _same(s_new, s + p_raw.sum(dim=-1, keepdim=True)):
        return "exp(scores) without subtracting the max: use exp(scores - m_new)"
    if not _same(s_new, expected[1]):
        return "wrong s_new: expected s * exp(m - m_new) + sum of exp(scores - m_new)"
    return "wrong acc_new: expected acc * exp(m - m_new) + exp(scores - m_new) @ v_block"
