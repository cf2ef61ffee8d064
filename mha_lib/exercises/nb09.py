"""Checkers for notebook 09 (FlashAttention as a Triton kernel).

- `check_logsumexp_kernel(kernel)`: a `@triton.jit` kernel
  `kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr)`, one program
  instance per row, that walks the row in blocks of BLOCK columns keeping a running
  max and a running sum (the online softmax's bookkeeping) and stores the row's
  log-sum-exp at out_ptr + row. The checker launches it under the interpreter on
  rows whose length is and is not a multiple of BLOCK, with NaN stored just past
  the end of each row, so a load without `mask=` shows up;
- `check_causal_key_end(fn)`: fn(start_q, block_q, N, M, causal) -> one past the
  last key a causal query block may see, the bound of the forward kernel's loop
  over keys. The checker counts the tiles the bound makes a kernel visit, over
  every query block, and compares with the fewest that see every allowed key.

This module imports torch and triton (through `mha_lib.efficient.triton_flash`, which
chooses the interpreter on a machine without a GPU), so `mha_lib.exercises` does
not import it: notebook 09 writes `from mha_lib.exercises.nb09 import ...`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..efficient import triton_flash as ta
from ._base import checker, run

__all__ = ["check_causal_key_end", "check_logsumexp_kernel"]


# ---------------------------------------------------------------------------- log-sum-exp kernel


def _is_kernel(fn) -> bool:
    """True for a function decorated with @triton.jit (compiled or interpreted)."""
    return hasattr(fn, "__getitem__") and callable(getattr(fn, "fn", None))


def _online_lse(row, block, *, rescale=True, sign=1, add_m=True, pad=None, reset=False):
    """The blocked log-sum-exp of one row (float64) and its usual mistakes."""
    n = len(row)
    m, s = -math.inf, 0.0
    for j0 in range(0, n, block):
        x = list(row[j0 : j0 + block])
        if pad is not None:
            x += [pad] * (block - len(x))  # what a load returns where the mask is False
        if reset:
            m, s = -math.inf, 0.0
        m_new = max(m, max(x))
        factor = math.exp(sign * (m - m_new)) if rescale and m > -math.inf else 1.0
        s = s * factor + sum(math.exp(xi - m_new) for xi in x)
        m = m_new
    return (m if add_m else 0.0) + math.log(s)


def _lse_mistakes(rows, block) -> dict[str, np.ndarray]:
    def each(**kw):
        return np.array([_online_lse(r, block, **kw) for r in rows])

    return {
        "the masked-out columns of the last block are loaded as 0 and count as exp(0 - m): "
        "load with other=-float('inf') so that they add exp(-inf) = 0": each(pad=0.0),
        "the running sum is not rescaled when the max grows: s = s * exp(m - m_new) + ...": each(
            rescale=False
        ),
        "the rescale factor is upside down: exp(m - m_new) (at most 1), not exp(m_new - m)": each(
            sign=-1
        ),
        "the result forgets the max: log-sum-exp = m + log(s), with s summed relative to m": each(
            add_m=False
        ),
        "m and s are reset inside the loop over blocks: only the last block is counted; "
        "initialise them once, before the loop": each(reset=True),
    }


def _lse_cases():
    """(rows (R, n), BLOCK): a row length that is not a multiple of BLOCK first."""
    gen = torch.Generator().manual_seed(9)
    cases = []
    for R, n, block in ((3, 37, 16), (2, 5, 16), (2, 48, 16)):
        rows = torch.randn(R, n, generator=gen, dtype=torch.float64) * 3
        rows[:, n // 2 :] += 6.0  # the max grows in a later block, so rescaling matters
        rows[0] += 95.0  # exp without the max subtracted overflows float32 here
        cases.append((rows.float(), block))
    return cases


_UNSET = -12345.0  # what out holds before the kernel runs


def _launch(kernel, rows: torch.Tensor, block: int):
    """Run the kernel over rows stored with NaN past each row's end; (out, problem)."""
    R, n = rows.shape
    stride = -(-n // block) * block + 5  # room for a whole last block of NaN, and more
    x = torch.full((R, stride), math.nan, dtype=torch.float32, device=ta.DEVICE)
    x[:, :n] = rows.to(ta.DEVICE)
    out = torch.full((R,), _UNSET, dtype=torch.float32, device=ta.DEVICE)
    if not _is_kernel(kernel):
        _, problem = run(kernel, x, out, n, stride, block)
        raised = problem is not None and problem.startswith("your function raised")
        return None, problem if raised else (
            f"expected a @triton.jit kernel; got {type(kernel).__name__} (decorate the "
            "function with @triton.jit)"
        )
    _, problem = run(lambda: kernel[(R,)](x, out, n, stride, BLOCK=block) or 0)
    if problem is not None:
        return None, problem
    if not torch.equal(x[:, n:].isnan(), torch.ones_like(x[:, n:], dtype=torch.bool)):
        return None, "the kernel writes into x: it must only read x and store into out_ptr"
    if torch.any(out == _UNSET):
        return None, "out_ptr + row holds nothing for some rows: store each row's result there"
    return out.cpu().double().numpy(), None


@checker("logsumexp_kernel")
def check_logsumexp_kernel(kernel):
    """Check a blocked log-sum-exp kernel against torch.logsumexp, row by row."""
    problem = None
    for rows, block in _lse_cases():
        n = rows.shape[1]
        got, problem = _launch(kernel, rows, block)
        if problem is None:
            problem = _diagnose_lse(got, rows.double(), block)
        if problem is not None:
            if not problem.startswith(("your function raised", "expected a @triton", "out_ptr")):
                problem += f" [rows of {n} columns, BLOCK = {block}]"
            break
    return problem


def _diagnose_lse(got: np.ndarray, rows: torch.Tensor, block: int) -> str | None:
    n = rows.shape[1]
    expected = torch.logsumexp(rows, dim=1).numpy()  # (R,)
    if np.allclose(got, expected, rtol=1e-5, atol=1e-5):
        return None
    if np.any(np.isnan(got)):
        if not np.isnan(got[0]) and n % block:
            return (
                "rows after the first are wrong: row r starts at x_ptr + r * stride_row "
                "(the rows are not packed one after the other)"
            )
        if n % block:
            return (
                "NaN: the last block's loads read past the end of the row (there lies "
                "whatever follows in memory); load with mask=cols < n_cols"
            )
        return "out_ptr + row holds NaN for some rows: store one result per row"
    if np.any(np.isinf(got)) or not np.all(np.isfinite(got)):
        return "exp overflowed: subtract the running max before exp, exp(x - m)"
    rows_list = rows.tolist()
    for message, wrong in _lse_mistakes(rows_list, block).items():
        if np.allclose(got, wrong, rtol=1e-5, atol=1e-5) and not np.allclose(
            wrong, expected, rtol=1e-5, atol=1e-5
        ):
            return message
    if np.allclose(got[0], expected[0], rtol=1e-5, atol=1e-5):
        return (
            "rows after the first are wrong: row r starts at x_ptr + r * stride_row "
            "(the rows are not packed one after the other)"
        )
    if np.allclose(got, expected / math.log(2), rtol=1e-5) or np.allclose(
        got * math.log(2), expected, rtol=1e-4
    ):
        return "the result is in base 2: tl.exp goes with tl.log (tl.exp2 with tl.log2)"
    return "wrong values: expected log(sum(exp(x))) of each row (torch.logsumexp)"


# ---------------------------------------------------------------------------- causal key end


def _tiles(end_fn, N, M, block_q, block_k, causal) -> tuple[int, list]:
    """(tiles visited, the query blocks whose bound is wrong and how) under a bound end_fn."""
    total, wrong = 0, []
    for start_q in range(0, N, block_q):
        end = end_fn(start_q, block_q, N, M, causal)
        need = ta.causal_key_end(start_q, block_q, N, M, causal)
        total += max(0, -(-end // block_k))
        if end != need:
            wrong.append((start_q, end, need))
    return total, wrong


_CASES = (  # (N, M, block_q, block_k, causal): square, not multiples, N != M both ways
    (64, 64, 16, 16, "top_left"),
    (37, 53, 16, 16, "bottom_right"),
    (53, 37, 16, 16, "top_left"),
    (37, 53, 16, 16, "top_left"),
    (50, 29, 16, 8, "bottom_right"),
    (29, 40, 8, 16, None),
)


def _key_end_mistakes() -> dict[str, object]:
    def last(s, b, N):
        return min(s + b, N) - 1

    def off(N, M, c):
        return M - N if c == "bottom_right" else 0

    return {
        "it visits every key block: a causal query block needs keys only up to its last "
        "row (+ M - N when bottom-right); the tiles above the diagonal are all masked": (
            lambda s, b, N, M, c: M
        ),
        "it stops before the diagonal tile: the block's rows see keys up to start_q + "
        "block_q - 1 (+ offset), so the loop must run to one past that": (
            lambda s, b, N, M, c: max(0, min(M, s + off(N, M, c)))
        ),
        "it is one short: one past the last visible key is last_row + offset + 1": (
            lambda s, b, N, M, c: M if c is None else max(0, min(M, last(s, b, N) + off(N, M, c)))
        ),
        "it ignores the alignment: with bottom_right, query i sees keys up to i + M - N": (
            lambda s, b, N, M, c: M if c is None else max(0, min(M, last(s, b, N) + 1))
        ),
        "the offset has the wrong sign: bottom_right shifts the diagonal by M - N, not N - M": (
            lambda s, b, N, M, c: (
                M
                if c is None
                else max(0, min(M, last(s, b, N) + (N - M if c == "bottom_right" else 0) + 1))
            )
        ),
        "it is not clamped to M: past the last key there is nothing to visit": (
            lambda s, b, N, M, c: M if c is None else max(0, last(s, b, N) + off(N, M, c) + 1)
        ),
        "the last query block is partial: its last row is N - 1, not start_q + block_q - 1": (
            lambda s, b, N, M, c: M if c is None else max(0, min(M, s + b + off(N, M, c)))
        ),
        "without a causal mask (causal=None) every query block sees all M keys": (
            lambda s, b, N, M, c: ta.causal_key_end(s, b, N, M, c or "top_left")
        ),
    }


@checker("causal_key_end")
def check_causal_key_end(fn):
    """Check fn(start_q, block_q, N, M, causal) -> int over every query block of a few
    shapes, counting the (query block, key block) tiles the bound visits."""
    for N, M, block_q, block_k, causal in _CASES:
        ends = []
        for start_q in range(0, N, block_q):
            result, problem = run(fn, start_q, block_q, N, M, causal)
            if problem is not None:
                return problem
            if isinstance(result, bool) or not isinstance(result, int | np.integer):
                if isinstance(result, torch.Tensor) and result.numel() == 1:
                    result = int(result)
                else:
                    return f"expected an int; got {type(result).__name__}"
            ends.append(int(result))
        it = iter(ends)
        got, wrong = _tiles(lambda *a: next(it), N, M, block_q, block_k, causal)
        if not wrong:
            continue
        need, _ = _tiles(ta.causal_key_end, N, M, block_q, block_k, causal)
        where = f"[N = {N}, M = {M}, block_q = {block_q}, causal = {causal!r}: {got} tiles"
        where += f" visited, {need} needed]"
        for message, mistake in _key_end_mistakes().items():
            if [mistake(s, block_q, N, M, causal) for s in range(0, N, block_q)] == ends:
                return f"{message} {where}"
        start_q, end, right = wrong[0]
        if end < right:
            return (
                f"the block at start_q = {start_q} stops at key {end}, but its rows may see "
                f"keys up to {right - 1}: those keys would be left out {where}"
            )
        return (
            f"the block at start_q = {start_q} runs to key {end}; {right} suffice: every "
            f"key from {right} on is masked for all its rows {where}"
        )
    return None
